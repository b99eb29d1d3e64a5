package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCgroupMemoryLimit: the limit is read from our own cgroup's directory when the
// mount shows it, else from the mount's top, for cgroup v2 and v1; "max" and v1's
// huge number mean none.
func TestCgroupMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"v2 own", map[string]string{"proc/self/cgroup": "0::/kubepods/pod1/c1\n",
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": "104857600\n", "sys/fs/cgroup/memory.max": "max\n"}, 100 << 20},
		{"v2 namespaced", map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "209715200\n"}, 200 << 20},
		{"v2 host path unseen", map[string]string{"proc/self/cgroup": "0::/kubepods/pod1/c1\n", "sys/fs/cgroup/memory.max": "52428800"}, 50 << 20},
		{"v2 none", map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "max\n"}, 0},
		{"v1", map[string]string{"proc/self/cgroup": "4:memory:/kubepods/c1\n3:cpu,cpuacct:/kubepods/c1\n",
			"sys/fs/cgroup/memory/kubepods/c1/memory.limit_in_bytes": "104857600\n"}, 100 << 20},
		{"v1 none", map[string]string{"proc/self/cgroup": "4:memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0},
		{"nothing", map[string]string{}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			for f, data := range c.files {
				p := filepath.Join(root, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got, file := cgroupMemoryLimit(root); got != c.want {
				t.Fatalf("limit %d from %q, want %d", got, file, c.want)
			}
		})
	}
}
