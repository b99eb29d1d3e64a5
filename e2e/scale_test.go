package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench"
	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/testenv"
)

// TestScale500: 500 simulated hosts' leases in a real etcd; weftd and the upstream
// flanneld, each alone on a fresh host with the vxlan backend, must put a route to
// every one of them into the kernel, follow a churn of lease changes with a compaction
// (every change seen, no stale or missing route against etcd afterwards) and an etcd
// restart (again nothing stale or missing). Nothing is timed: `weft-bench scale`
// measures.
func TestScale500(t *testing.T) {
	testenv.NeedRoot(t)
	testenv.NeedTools(t, "etcd", "ip")
	fl := filepath.Join(binDir(), "flanneld")
	_, err := os.Stat(fl)
	testenv.Need(t, err == nil, "upstream flanneld at "+fl+" (make flanneld builds it)")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	state := filepath.Join(t.TempDir(), "scale.json")
	testenv.OnInterrupt(t, "scale lab", func() error { return lab.Down(state) })
	t.Cleanup(func() { _ = lab.Down(state) })
	rep, err := bench.RunScale(ctx, bench.ScaleOptions{
		StateFile: state,
		Sizes:     []int{500},
		Backend:   "vxlan",
		Subjects: []bench.ScaleSubject{
			{Name: "weftd", Binary: weftd(t), Weft: true},
			{Name: "flanneld", Binary: fl},
		},
		Idle:  time.Second,
		Churn: 4 * time.Second,
		Rate:  50,
	}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("scale run: %v", err)
	}
	if len(rep.Points) != 2 {
		t.Fatalf("%d points, want 2 (weftd, flanneld)", len(rep.Points))
	}
	for _, p := range rep.Points {
		if len(p.Errors) > 0 {
			t.Errorf("%s: %v", p.Subject, p.Errors)
			continue
		}
		if !p.PeersSeen || p.Hosts != 500 {
			t.Errorf("%s: peers observed %v at %d hosts, want every one of 500 routes seen", p.Subject, p.PeersSeen, p.Hosts)
		}
		if p.ChurnOps < 50 {
			t.Errorf("%s: %d lease changes during the churn, want at least 50", p.Subject, p.ChurnOps)
		}
		if p.Missed != 0 {
			t.Errorf("%s: %d of %d lease changes never reached the kernel routes", p.Subject, p.Missed, p.ChurnOps)
		}
		if p.StaleAfterChurn != 0 || p.MissingAfterChurn != 0 {
			t.Errorf("%s after the churn: %d stale and %d missing routes against etcd", p.Subject, p.StaleAfterChurn, p.MissingAfterChurn)
		}
		if p.OvertakeChanges == 0 || p.OvertakeCatchUpS < 0 || p.StaleAfterOvertake != 0 || p.MissingAfterOvertake != 0 {
			report := t.Errorf
			if p.Subject != "weftd" {
				report = t.Logf
			}
			report("%s after %d changes and a compaction overtook its watch: caught up %v, %d stale and %d missing routes against etcd",
				p.Subject, p.OvertakeChanges, p.OvertakeCatchUpS >= 0, p.StaleAfterOvertake, p.MissingAfterOvertake)
		}
		if p.StaleAfterRestart != 0 || p.MissingAfterRestart != 0 {
			t.Errorf("%s after the etcd restart: %d stale and %d missing routes against etcd", p.Subject, p.StaleAfterRestart, p.MissingAfterRestart)
		}
		if p.WatchOverflows != 0 {
			t.Errorf("%s: the route subscription overflowed %d times: the check saw only part of the events", p.Subject, p.WatchOverflows)
		}
	}
	if w := rep.Points[0]; w.ResyncsChurn < 0 || w.ResyncsRestart < 0 {
		t.Errorf("weftd's re-list counter could not be read from /metrics (%v, %v)", w.ResyncsChurn, w.ResyncsRestart)
	} else if w.ResyncsOvertake != 1 {
		t.Errorf("weftd re-listed %v times after a compaction overtook its watch, want exactly 1", w.ResyncsOvertake)
	}
}

// TestScaleSites: 200 simulated hosts of another site, each with a WireGuard key;
// weftd with the wireguard backend and --site chooses each one's way. None answers,
// so every first way must be left, and none before a round of the probes on it was
// judged (weft_path_left_unprobed_total): the way is tried for at least the
// probes' first round. Nothing is timed: `weft-bench scale --backend wireguard
// --sites` measures, at 5,000.
func TestScaleSites(t *testing.T) {
	testenv.NeedRoot(t)
	testenv.NeedTools(t, "etcd", "ip")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	state := filepath.Join(t.TempDir(), "scale.json")
	testenv.OnInterrupt(t, "scale lab", func() error { return lab.Down(state) })
	t.Cleanup(func() { _ = lab.Down(state) })
	const n = 200
	rep, err := bench.RunScale(ctx, bench.ScaleOptions{
		StateFile: state, Sizes: []int{n}, Backend: "wireguard", Sites: true,
		Subjects:    []bench.ScaleSubject{{Name: "weftd", Binary: weftd(t), Weft: true}},
		Idle:        time.Second,
		WaysSettled: time.Second,
		Churn:       2 * time.Second,
		Rate:        50,
		NoRestart:   true,
		NoOvertake:  true,
	}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("scale run: %v", err)
	}
	if len(rep.Points) != 1 {
		t.Fatalf("%d points, want 1", len(rep.Points))
	}
	p := rep.Points[0]
	if len(p.Errors) > 0 {
		t.Fatalf("weftd: %v", p.Errors)
	}
	if !p.PeersSeen || p.ProbePktsPerS <= 0 {
		t.Fatalf("peers observed %v, probe packets %.1f/s: want every peer in the device and probes", p.PeersSeen, p.ProbePktsPerS)
	}
	if p.WaysLeft < n {
		t.Errorf("%d of %d first ways left, want all (no simulated host answers)", p.WaysLeft, n)
	}
	if p.Unprobed == nil {
		t.Fatal("weft_path_left_unprobed_total not read from weftd's /metrics")
	}
	if *p.Unprobed != 0 {
		t.Errorf("%d first ways left before the probes judged them, want 0", *p.Unprobed)
	}
	t.Logf("%d first ways left %.1f s after ready, %d unprobed", p.WaysLeft, p.WaysS, *p.Unprobed)
}
