package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstall(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("plugin v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		dst  string
		perm os.FileMode
	}{
		{"keeps mode", []string{src, filepath.Join(dir, "flannel")}, "flannel", 0o755},
		{"explicit mode", []string{"-mode", "0644", src, filepath.Join(dir, "10-flannel.conflist")}, "10-flannel.conflist", 0o644},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := filepath.Join(dir, tt.dst)
			// An older file is replaced, not appended to or merged with.
			if err := os.WriteFile(dst, []byte("an older and longer plugin v1"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := run(tt.args); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(dst)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "plugin v2" {
				t.Errorf("content %q, want %q", got, "plugin v2")
			}
			st, err := os.Stat(dst)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != tt.perm {
				t.Errorf("mode %v, want %v", st.Mode().Perm(), tt.perm)
			}
		})
	}
	left, err := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if err != nil || len(left) != 0 {
		t.Errorf("temporary files left behind: %v (%v)", left, err)
	}
}

func TestInstallErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{filepath.Join(dir, "missing"), filepath.Join(dir, "dst")},
		{dir, filepath.Join(dir, "dst")},
		{"only-one"},
		{"-mode", "9z", dir, filepath.Join(dir, "dst")},
	} {
		if err := run(args); err == nil {
			t.Errorf("run(%q) succeeded, want an error", args)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "dst")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed install left dst behind: %v", err)
	}
}

// canalConflist is a config in the form Canal's install step writes (Calico's plugin
// with host-local on the node's podCIDR, then portmap and bandwidth), written for this
// test.
const canalConflist = `{
  "name": "k8s-pod-network",
  "cniVersion": "0.3.1",
  "plugins": [
    {"type": "calico", "datastore_type": "kubernetes", "nodename": "node-a", "mtu": 1450,
     "ipam": {"type": "host-local", "subnet": "usePodCidr"},
     "policy": {"type": "k8s"},
     "kubernetes": {"kubeconfig": "/etc/cni/net.d/calico-kubeconfig"}},
    {"type": "portmap", "snat": true, "capabilities": {"portMappings": true}},
    {"type": "bandwidth", "capabilities": {"bandwidth": true}}
  ]
}`

func TestInstallMovesCanalAside(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "cni-conf.json")
	netd := filepath.Join(dir, "net.d")
	files := map[string]string{
		"10-canal.conflist":   canalConflist,
		"05-other.conflist":   `{"name": "other", "plugins": [{"type": "bridge"}]}`, // unknown: left, warned about
		"calico-kubeconfig":   "kubeconfig",                                         // not a config
		"99-loopback.conf":    `{"type": "loopback"}`,                               // after weft's: left
		"10-flannel.conflist": "an older config",
	}
	if err := os.Mkdir(netd, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(netd, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(src, []byte(`{"name": "cbr0", "plugins": [{"type": "flannel"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	dst := filepath.Join(netd, "10-flannel.conflist")
	if err := install(src, dst, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := clearShadows(dst, &log); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(netd, "10-canal.conflist.weft-backup"))
	if err != nil || string(got) != canalConflist {
		t.Errorf("backup: %q, %v; want Canal's config as it was", got, err)
	}
	if _, err := os.Stat(filepath.Join(netd, "10-canal.conflist")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("10-canal.conflist still there: %v", err)
	}
	for _, name := range []string{"05-other.conflist", "calico-kubeconfig", "99-loopback.conf"} {
		if got, err := os.ReadFile(filepath.Join(netd, name)); err != nil || string(got) != files[name] {
			t.Errorf("%s changed: %q, %v", name, got, err)
		}
	}
	names, err := cniConfigs(netd)
	if err != nil {
		t.Fatal(err)
	}
	if want := "05-other.conflist 10-flannel.conflist 99-loopback.conf"; strings.Join(names, " ") != want {
		t.Errorf("configs %q, want %q", names, want)
	}
	for _, want := range []string{
		"moved " + filepath.Join(netd, "10-canal.conflist") + " aside to 10-canal.conflist.weft-backup",
		"warning: " + filepath.Join(netd, "05-other.conflist") + " sorts before 10-flannel.conflist",
		"the container runtime's CNI config in " + netd + ": 05-other.conflist",
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
	if strings.Contains(log.String(), "99-loopback") || strings.Contains(log.String(), "calico-kubeconfig") {
		t.Errorf("log names a file that does not shadow weft's:\n%s", log.String())
	}
}

func TestInstallLeavesOthersAlone(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("plugin"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A 10-canal.conflist that names neither Calico's plugin nor flannel's is not
	// Canal's: left, with a warning.
	notCanal := `{"name": "x", "plugins": [{"type": "ptp"}]}`
	if err := os.WriteFile(filepath.Join(dir, "10-canal.conflist"), []byte(notCanal), 0o644); err != nil {
		t.Fatal(err)
	}
	// Installing a plugin (no CNI extension) looks at no config.
	if err := run([]string{src, filepath.Join(dir, "flannel")}); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	if err := clearShadows(filepath.Join(dir, "10-flannel.conflist"), &log); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "10-canal.conflist")); err != nil || string(got) != notCanal {
		t.Errorf("10-canal.conflist: %q, %v", got, err)
	}
	if !strings.Contains(log.String(), "warning: "+filepath.Join(dir, "10-canal.conflist")) {
		t.Errorf("no warning:\n%s", log.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "10-canal.conflist.weft-backup")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a backup was made: %v", err)
	}
}
