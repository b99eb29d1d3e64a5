package bench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/testenv"
)

// TestSoakShort runs a short soak on vxlan (every event type at least once): no lease
// is lost, no subnet changes, every pod reaches every other at the end, and the lab is
// gone afterwards. The score table is logged.
func TestSoakShort(t *testing.T) {
	testenv.SkipShort(t, "a namespace lab")
	testenv.NeedRoot(t)
	testenv.NeedTools(t, "ip", "bridge", "etcd", "ping", "sysctl")
	before := labNamespaces(t)
	var progress strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	state := filepath.Join(t.TempDir(), "soak.json")
	testenv.OnInterrupt(t, "soak lab", func() error { return lab.Down(state) })
	t.Cleanup(func() { _ = lab.Down(state) })
	rep, err := Soak(ctx, SoakOptions{Weftd: binary(t, "weftd"), Backend: "vxlan", Hosts: 4,
		Duration: 45 * time.Second, Every: 2500 * time.Millisecond, Seed: 1, Progress: &progress, StateFile: state},
		zaptest.NewLogger(t))
	t.Logf("events:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	_ = rep.WriteTable(&table)
	t.Logf("\n%s", table.String())
	for _, ev := range soakEvents("vxlan") {
		if rep.Events[ev] == nil || rep.Events[ev].Count == 0 {
			t.Errorf("event %q never happened", ev)
		}
	}
	if rep.LeasesLost != 0 || rep.SubnetChanges != 0 || len(rep.Unreachable) != 0 {
		t.Errorf("leases lost %d, subnet changes %d, unreachable %v", rep.LeasesLost, rep.SubnetChanges, rep.Unreachable)
	}
	if len(rep.Errors) > 0 {
		t.Errorf("events failed: %v", rep.Errors)
	}
	for _, d := range rep.Daemons {
		if d.Start.Goroutines < 0 || d.End.Goroutines < 0 {
			t.Errorf("weftd on %s: goroutines not read from /metrics (start %d, end %d)", d.Host, d.Start.Goroutines, d.End.Goroutines)
		}
	}
	if rep.PingsSent == 0 {
		t.Error("no pings sent")
	}
	after := labNamespaces(t)
	for n := range after {
		if !before[n] && strings.HasPrefix(n, "ws-") {
			t.Errorf("namespace %s left behind", n)
		}
	}
}
