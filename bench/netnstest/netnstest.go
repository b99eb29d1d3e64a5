// Package netnstest makes network namespaces for a test and removes them at cleanup.
package netnstest

import (
	"testing"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
)

// New makes a namespace for t, removed (with its processes and links) at cleanup.
func New(t testing.TB, prefix string) *netns.NS {
	t.Helper()
	testenv.SkipShort(t, "network namespaces")
	testenv.NeedRoot(t)
	testenv.NeedTools(t, "ip")
	n, err := netns.New(prefix)
	if err != nil {
		t.Fatalf("netns: %v", err)
	}
	testenv.OnInterrupt(t, "namespace "+n.Name, n.Close)
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("remove netns %s: %v", n.Name, err)
		}
	})
	return n
}
