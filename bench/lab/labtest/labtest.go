// Package labtest builds a lab for a test and removes it at cleanup.
package labtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/testenv"
)

// New builds spec for t; everything it makes is removed at cleanup, and the test
// fails if a namespace of it is left behind. When
// the test failed, the log of every daemon the lab ran is shown. Under -short the
// test is skipped (a lab needs root); missing root, ip or etcd fails the test under
// WEFT_E2E=1 and skips it otherwise.
func New(t testing.TB, spec lab.Spec) *lab.Lab {
	t.Helper()
	testenv.SkipShort(t, "a namespace lab")
	testenv.NeedRoot(t)
	tools := []string{"ip", "sysctl"}
	if !spec.NoRouter {
		tools = append(tools, "bridge")
	}
	if !spec.NoEtcd && !spec.NoRouter {
		tools = append(tools, "etcd")
	}
	testenv.NeedTools(t, tools...)
	l, err := lab.New(context.Background(), spec, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	testenv.OnInterrupt(t, "lab", l.Close)
	t.Cleanup(func() {
		if t.Failed() {
			seen := map[string]bool{}
			for _, d := range l.Daemons() {
				if seen[d.LogPath] {
					continue // a restart: the same log
				}
				seen[d.LogPath] = true
				t.Logf("log of %s on %s (%s):\n%s", d.Binary, d.Host.Name, d.LogPath, d.Log())
			}
		}
		names := l.State().Namespaces
		if err := l.Close(); err != nil {
			t.Errorf("lab close: %v", err)
		}
		for _, n := range lab.Leftover(names) {
			t.Errorf("namespace %s left behind", n)
		}
	})
	return l
}

// CNIPath returns the CNI_PATH for Lab.AttachCNIPod: binDir/cni, where make deps
// builds the flannel CNI plugin, then Debian's /usr/lib/cni (bridge, host-local).
// Missing plugins fail the test under WEFT_E2E=1 and skip it otherwise.
func CNIPath(t testing.TB, binDir string) string {
	t.Helper()
	flannel := filepath.Join(binDir, "cni")
	_, err := os.Stat(filepath.Join(flannel, "flannel"))
	testenv.Need(t, err == nil, "the flannel CNI plugin in "+flannel+" (make deps builds it)")
	_, err = os.Stat("/usr/lib/cni/bridge")
	testenv.Need(t, err == nil, "/usr/lib/cni/bridge and host-local (Debian's containernetworking-plugins)")
	return flannel + ":/usr/lib/cni"
}

// BinDir is where make puts the binaries tests run: $WEFT_BIN (make test sets it),
// else rel (the repository's bin directory relative to the test's package).
func BinDir(rel string) string {
	dir := os.Getenv("WEFT_BIN")
	if dir == "" {
		dir = rel
	}
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}
