package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/testenv"
)

// TestSitesBench runs the sites rows (underlay, wireguard direct, punched, relayed)
// for one repetition of one second: every row is on its way (RunSites checks GET
// /peers before it measures), has non-zero figures and a ratio to the underlay, the
// userspace rows cost their daemons CPU, and nothing is left behind.
func TestSitesBench(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e")
	}
	testenv.NeedRoot(t)
	testenv.NeedTools(t, "ip", "bridge", "etcd", "iperf3", "ping", "nft", "unshare")
	before := labNamespaces(t)
	var progress strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	state := filepath.Join(t.TempDir(), "run.json")
	testenv.OnInterrupt(t, "sites bench lab", func() error { return lab.Down(state) })
	t.Cleanup(func() { _ = lab.Down(state) })
	rep, err := RunSites(ctx, binary(t, "weftd"), Options{Reps: 1, Duration: time.Second, Pings: 50,
		StateFile: state, Progress: &progress}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("sites run: %v\n%s", err, progress.String())
	}
	t.Logf("progress:\n%s", progress.String())
	var table strings.Builder
	_ = rep.WriteTable(&table)
	t.Logf("\n%s", table.String())
	want := []string{Underlay, WireGuardDirect, WireGuardPunched, WireGuardRelayed}
	if len(rep.Rows) != len(want) {
		t.Fatalf("%d rows, want %v", len(rep.Rows), want)
	}
	for i, row := range rep.Rows {
		if row.Subject != want[i] {
			t.Errorf("row %d is %s, want %s", i, row.Subject, want[i])
		}
		if len(row.Errors) > 0 {
			t.Errorf("%s: %s", row.Subject, strings.Join(row.Errors, "\n"))
			continue
		}
		for _, k := range []string{TCPGbps, UDPKpps, RTTMedian, RTTP99} {
			if row.Median[k] <= 0 {
				t.Errorf("%s: %s = %v, want > 0", row.Subject, k, row.Median[k])
			}
		}
		if row.Subject != Underlay && (row.Median[CPUPerGBs] <= 0 || row.VsUnderlay[TCPGbps] <= 0) {
			t.Errorf("%s: daemon CPU per GB %v, TCP ratio to the underlay %v: want both > 0",
				row.Subject, row.Median[CPUPerGBs], row.VsUnderlay[TCPGbps])
		}
	}
	for n := range labNamespaces(t) {
		if !before[n] {
			t.Errorf("namespace %s left behind", n)
		}
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state file left behind: %v", err)
	}
}
