package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench"
)

// TestCheckIn: `check --in` holds an earlier run's report.json to the goals, exit
// status 0 when every goal is met and 1 with the missed ones marked FAIL otherwise.
func TestCheckIn(t *testing.T) {
	if got := checkSubjects(); got != "kernel-vxlan,weftd-udp,weftd-wireguard" {
		t.Errorf("check's subjects %q", got)
	}
	pct := func(v float64) *float64 { return &v }
	rep := &bench.Report{Started: time.Date(2026, 11, 28, 8, 30, 0, 0, time.UTC), Reps: 1, DurationS: 1, IdleS: 60,
		Commit: "abc1234", CPUModel: "Test CPU", CPUs: 2, Kernel: "6.18.44",
		Rows: []bench.Row{
			{Subject: bench.KernelVXLAN, Kind: bench.KindReference, Reps: []bench.Figures{{bench.TCPGbps: 10, bench.RTTMedian: 150, bench.TotalCPUPerGB: 1}}},
			{Subject: bench.WeftdUDP, Kind: bench.KindWeft, IdleCPUPct: pct(0.1), Reps: []bench.Figures{{bench.TCPGbps: 8, bench.RTTMedian: 200, bench.TotalCPUPerGB: 2}}},
			{Subject: bench.WeftdWireGuard, Kind: bench.KindWeft, IdleCPUPct: pct(0.1), Reps: []bench.Figures{{bench.TCPGbps: 6, bench.RTTMedian: 210, bench.TotalCPUPerGB: 3}}},
		}}
	rep.Finish()
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"check", "--in", dir}, &out, &errb); code != 0 {
		t.Fatalf("a run meeting every goal: code %d\n%s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"commit abc1234", "Test CPU", "2 CPUs", "Linux 6.18.44", "all 6 goals met"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	// The wireguard row's figures of the 2026-11-26 run: all three of its goals missed.
	rep.Rows[2].Reps[0] = bench.Figures{bench.TCPGbps: 2.76, bench.RTTMedian: 514, bench.TotalCPUPerGB: 4.97}
	rep.Finish()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	code := run([]string{"check", "--in", filepath.Join(dir, "report.json")}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "3 of 6 goals missed") || strings.Count(out.String(), "FAIL") != 3 {
		t.Errorf("missed goals: code %d\n%s%s", code, out.String(), errb.String())
	}

	// Not a report: an error, not a pass.
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"rows": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"check", "--in", bad}, &out, &errb); code != 1 {
		t.Errorf("a report without rows: code %d", code)
	}
	if code := run([]string{"check", "--in", filepath.Join(dir, "nope")}, &out, &errb); code != 1 {
		t.Errorf("no report: code %d", code)
	}
	if code := run([]string{"check", "extra"}, &out, &errb); code != 2 {
		t.Errorf("an argument: code %d", code)
	}
}
