// Package testenv holds helpers shared by tests that need the outside world: root,
// network namespaces, tools on PATH.
package testenv

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// E2E reports whether missing prerequisites must fail tests (make test sets WEFT_E2E=1).
func E2E() bool { return os.Getenv("WEFT_E2E") == "1" }

// Need fails the test when WEFT_E2E=1 and skips it otherwise, with why.
func Need(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if E2E() {
		t.Fatalf("missing prerequisite (WEFT_E2E=1): %s", why)
	}
	t.Skipf("missing prerequisite: %s (set WEFT_E2E=1 to fail instead)", why)
}

// SkipShort skips t under -short: what it needs (root, etcd, network namespaces) is
// not there for the unit tests (go test -short runs as any user, without etcd).
func SkipShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s: not a -short test", what)
	}
}

// NeedRoot requires uid 0; under -short the test is skipped (see SkipShort).
func NeedRoot(t testing.TB) {
	t.Helper()
	SkipShort(t, "needs root")
	Need(t, os.Geteuid() == 0, "root is needed for network namespaces, TUN and netlink")
}

// NeedTools requires every named command on PATH and returns their paths.
func NeedTools(t testing.TB, names ...string) map[string]string {
	t.Helper()
	paths := map[string]string{}
	for _, n := range names {
		p, err := exec.LookPath(n)
		Need(t, err == nil, n+" is not on PATH (make deps installs it)")
		paths[n] = p
	}
	return paths
}

// Eventually retries f every 100 ms until it returns nil, and fails t with f's last
// error when d has passed first.
func Eventually(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
