package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// goalRun is a parsed run whose figures meet every goal: weftd-wireguard at 3.0
// s/GB total CPU against weftd udp's 2.0 (+1.0), 6 Gbit/s against 8 (0.75x), RTT
// 220 µs against 200 (1.1x); weftd udp's RTT 200 µs against kernel VXLAN's 150
// (1.33x), TCP 8 against 10 (0.8x), idle 0.2% of a core over 60 s.
const goalRun = `{
  "started": "2026-11-28T08:30:00Z", "reps": 3, "duration_s": 5, "idle_s": 60,
  "commit": "ce352c2-dirty", "cpu_model": "AMD EPYC 7B13", "cpus": 2, "kernel": "6.18.44",
  "rows": [
    {"subject": "kernel-vxlan", "kind": "reference",
     "median": {"tcp_gbps": 10, "rtt_median_us": 150, "total_cpu_s_per_gb": 0.9}},
    {"subject": "weftd-udp", "kind": "weft", "idle_cpu_pct": 0.2,
     "median": {"tcp_gbps": 8, "rtt_median_us": 200, "total_cpu_s_per_gb": 2.0, "idle_cpu_pct": 0.2}},
    {"subject": "weftd-wireguard", "kind": "weft", "idle_cpu_pct": 0.3,
     "median": {"tcp_gbps": 6, "rtt_median_us": 220, "total_cpu_s_per_gb": 3.0, "idle_cpu_pct": 0.3}}
  ]
}`

func parsedGoalRun(t *testing.T) *Report {
	t.Helper()
	var r Report
	if err := json.Unmarshal([]byte(goalRun), &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

func goalResult(t *testing.T, res []GoalResult, name string) GoalResult {
	t.Helper()
	for _, g := range res {
		if g.Name == name {
			return g
		}
	}
	t.Fatalf("no goal %q", name)
	return GoalResult{}
}

// TestGoals: each goal passes on the run above and fails when its figure moves past
// its limit (or cannot be measured), and no other goal changes.
func TestGoals(t *testing.T) {
	set := func(subject, key string, v float64) func(*Report) {
		return func(r *Report) { r.Row(subject).Median[key] = v }
	}
	for _, tc := range []struct {
		name     string
		goal     string
		change   func(*Report)
		met      bool
		measured float64 // when met or not, with figures
		missing  string  // a substring of Missing, for goals that cannot be measured
	}{
		{"wireguard CPU within +1.3", "userspace wireguard: total CPU", nil, true, 1.0, ""},
		{"wireguard CPU at the limit", "userspace wireguard: total CPU", set(WeftdWireGuard, TotalCPUPerGB, 3.3), true, 1.3, ""},
		{"wireguard CPU past +1.3", "userspace wireguard: total CPU", set(WeftdWireGuard, TotalCPUPerGB, 4.97), false, 2.97, ""},
		{"wireguard CPU, udp cheaper", "userspace wireguard: total CPU", set(WeftdUDP, TotalCPUPerGB, 1.5), false, 1.5, ""},

		{"wireguard TCP 0.75x", "userspace wireguard: TCP", nil, true, 0.75, ""},
		{"wireguard TCP 0.24x", "userspace wireguard: TCP", set(WeftdWireGuard, TCPGbps, 1.92), false, 0.24, ""},
		{"wireguard row failed", "userspace wireguard: TCP", func(r *Report) {
			w := r.Row(WeftdWireGuard)
			w.Median, w.Errors = Figures{}, []string{"subject weftd-wireguard: daemon exited\nlog"}
		}, false, math.NaN(), "weftd-wireguard failed: subject weftd-wireguard: daemon exited"},

		{"wireguard RTT 1.1x", "userspace wireguard: RTT", nil, true, 1.1, ""},
		{"wireguard RTT 1.45x", "userspace wireguard: RTT", set(WeftdWireGuard, RTTMedian, 290), false, 1.45, ""},
		{"wireguard row absent", "userspace wireguard: RTT", func(r *Report) { r.Rows = r.Rows[:2] }, false, math.NaN(), "no weftd-wireguard row"},

		{"udp RTT 1.33x", "weftd udp: RTT", nil, true, 200.0 / 150, ""},
		{"udp RTT 2.33x", "weftd udp: RTT", set(WeftdUDP, RTTMedian, 350), false, 350.0 / 150, ""},
		{"kernel vxlan absent", "weftd udp: RTT", func(r *Report) { r.Rows = r.Rows[1:] }, false, math.NaN(), "no kernel-vxlan row"},

		{"udp TCP 0.8x", "weftd udp: TCP", nil, true, 0.8, ""},
		{"udp TCP 0.46x", "weftd udp: TCP", set(WeftdUDP, TCPGbps, 4.6), false, 0.46, ""},
		{"kernel vxlan TCP missing", "weftd udp: TCP", func(r *Report) { delete(r.Row(KernelVXLAN).Median, TCPGbps) }, false, math.NaN(), "kernel-vxlan has no TCP figure"},

		{"udp idle 0.2%", "weftd udp: idle CPU", nil, true, 0.2, ""},
		{"udp idle 1%", "weftd udp: idle CPU", set(WeftdUDP, IdleCPUPct, 1), false, 1, ""},
		{"udp idle 5%", "weftd udp: idle CPU", set(WeftdUDP, IdleCPUPct, 5), false, 5, ""},
		{"idle window too short", "weftd udp: idle CPU", func(r *Report) { r.IdleS = 10 }, false, math.NaN(), "over 10s, the goal is over 60s"},
		{"idle not measured", "weftd udp: idle CPU", func(r *Report) { r.IdleS = 0; delete(r.Row(WeftdUDP).Median, IdleCPUPct) }, false, math.NaN(), "weftd-udp has no idle CPU figure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := parsedGoalRun(t)
			if tc.change != nil {
				tc.change(r)
			}
			res := r.Check(nil)
			if len(res) != len(Goals) {
				t.Fatalf("%d results for %d goals", len(res), len(Goals))
			}
			g := goalResult(t, res, tc.goal)
			if g.Met != tc.met {
				t.Errorf("met %v, want %v: %+v", g.Met, tc.met, g)
			}
			if tc.missing != "" {
				if !strings.Contains(g.Missing, tc.missing) || !math.IsNaN(g.Measured) {
					t.Errorf("missing %q, measured %v; want missing %q", g.Missing, g.Measured, tc.missing)
				}
			} else if g.Missing != "" || math.Abs(g.Measured-tc.measured) > 1e-9 {
				t.Errorf("measured %v (missing %q), want %v", g.Measured, g.Missing, tc.measured)
			}
			// Every other goal keeps its verdict on the passing run, but where the
			// change took away a row or figure the goal shares.
			for _, o := range res {
				if o.Name != tc.goal && !o.Met && o.Missing == "" {
					t.Errorf("goal %q changed too: %+v", o.Name, o)
				}
			}
			ok, missed := GoalsMet(res)
			if ok != tc.met || (tc.met && missed != 0) {
				t.Errorf("GoalsMet %v, %d missed", ok, missed)
			}
		})
	}
}

// TestGoalsAreRatios: every goal compares rows of one run, or is a share of a core;
// every subject and reference is a row of the matrix; every operator is known.
func TestGoalsAreRatios(t *testing.T) {
	rows := map[string]bool{}
	for _, s := range Subjects("weftd", nil) {
		rows[s.Name] = true
	}
	names := map[string]bool{}
	for _, g := range Goals {
		if names[g.Name] {
			t.Errorf("two goals named %q", g.Name)
		}
		names[g.Name] = true
		if !rows[g.Subject] || (g.Form != FormValue && !rows[g.Ref]) {
			t.Errorf("%s: %s against %q: not rows of the matrix", g.Name, g.Subject, g.Ref)
		}
		if g.Form == FormValue && g.Metric != IdleCPUPct {
			t.Errorf("%s: an absolute goal on %s; goals are ratios between rows of a run", g.Name, g.Metric)
		}
		if g.Op != "<=" && g.Op != ">=" && g.Op != "<" {
			t.Errorf("%s: operator %q", g.Name, g.Op)
		}
	}
	if len(Goals) != 6 {
		t.Errorf("%d goals; issue 38 has 6", len(Goals))
	}
}

func TestWriteGoals(t *testing.T) {
	r := parsedGoalRun(t)
	var b bytes.Buffer
	if err := WriteGoals(&b, r.Check(nil)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"goal", "wanted", "pass", "<= weftd-udp +1.30 s/GB", ">= 0.60x weftd-udp", "< 1.00 % core", "all 6 goals met"} {
		if !strings.Contains(out, want) {
			t.Errorf("goal table lacks %q:\n%s", want, out)
		}
	}
	r.Row(WeftdWireGuard).Median[RTTMedian] = 290
	r.Rows = r.Rows[1:]
	b.Reset()
	if err := WriteGoals(&b, r.Check(nil)); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	for _, want := range []string{"1.45x", "290 µs against 200 µs", "FAIL", "not measured: no kernel-vxlan row", "3 of 6 goals missed"} {
		if !strings.Contains(out, want) {
			t.Errorf("goal table lacks %q:\n%s", want, out)
		}
	}
}

// TestRunRecord: the report names its commit, date and machine in the table's
// record line, Markdown and JSON.
func TestRunRecord(t *testing.T) {
	r := parsedGoalRun(t)
	r.LoadAvg = "1.50 1.20 0.90"
	r.Weftd = "weftd 0.2.0-dev commit ce352c2 go1.26.8"
	m := r.Machine()
	for _, want := range []string{"2026-11-28 08:30 UTC", "commit ce352c2-dirty", "AMD EPYC 7B13", "2 CPUs", "Linux 6.18.44", "load average 1.50 1.20 0.90", "idle window 60s", "measured weftd 0.2.0-dev"} {
		if !strings.Contains(m, want) {
			t.Errorf("record %q lacks %q", m, want)
		}
	}
	var md bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{m, "## Goals", "| userspace wireguard: RTT | <= 1.20x weftd-udp | 1.10x |", "all 6 goals met", "idle CPU % core"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if !strings.Contains(parseCPUModelString("processor\t: 0\nmodel name\t: AMD EPYC  7B13\nflags : x\n"), "AMD EPYC 7B13") {
		t.Error("cpu model")
	}
	if got := IdlePct(600*time.Millisecond, time.Minute); math.Abs(got-1) > 1e-9 {
		t.Errorf("IdlePct = %v, want 1", got)
	}
}

func parseCPUModelString(s string) string { return parseCPUModel(strings.NewReader(s)) }
