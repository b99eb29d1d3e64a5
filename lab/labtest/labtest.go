// Package labtest builds a lab for a test and removes it at cleanup.
package labtest

import (
	"context"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/lab"
	"github.com/weftnet/weft/internal/testenv"
)

// New builds spec for t; everything it makes is removed at cleanup, and the test
// fails if a namespace of it is left behind. Missing root, ip or etcd fails the test
// under WEFT_E2E=1 and skips it otherwise.
func New(t testing.TB, spec lab.Spec) *lab.Lab {
	t.Helper()
	testenv.NeedRoot(t)
	testenv.NeedTools(t, "ip", "bridge", "etcd", "sysctl")
	l, err := lab.New(context.Background(), spec, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	t.Cleanup(func() {
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
