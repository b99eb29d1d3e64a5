package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestScaleReportCommitted: the reports committed under docs/scale/ come out of
// their own scale.json byte for byte (JSON, SVG, and Markdown up to the notes added
// by hand), as weft-bench scale --report-from renders them. A change of ScalePoint's JSON shape (a field renamed,
// moved or dropped) or of the report writers fails here.
func TestScaleReportCommitted(t *testing.T) {
	for _, dir := range []string{"../docs/scale", "../docs/scale/kube", "../docs/scale/probing", "../docs/scale/probing-step", "../docs/scale/sites"} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(dir, "scale.json"))
			if err != nil {
				t.Fatal(err)
			}
			var rep ScaleReport
			if err := json.Unmarshal(data, &rep); err != nil {
				t.Fatal(err)
			}
			if len(rep.Points) == 0 {
				t.Fatalf("%s/scale.json has no points", dir)
			}
			out := t.TempDir()
			if err := rep.WriteFiles(out); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"scale.json", "scale.md", "scale.svg"} {
				want, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(filepath.Join(out, name))
				if err != nil {
					t.Fatal(err)
				}
				if name == "scale.md" {
					// Notes written by hand after the rendered part.
					if i := bytes.Index(want, []byte("\n## Notes")); i >= 0 {
						want = want[:i]
					}
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s/%s rendered again differs from the committed file:\n%s", dir, name, got)
				}
			}
		})
	}
}

// filledScalePoint has every field set, each to a value of its own.
func filledScalePoint() ScalePoint {
	var p ScalePoint
	p.Subject, p.Binary, p.Hosts = "weftd", "weftd", 5000
	p.ReadyS, p.PeersSeen, p.RSSMiB, p.IdleCPUPct, p.ProbePktsPerS = 1.5, true, 60.25, 0.5, 249.5
	unprobed := 2
	p.WaysLeft, p.WaysS, p.Unprobed, p.WaysCPUPct = 4999, 14.5, &unprobed, 3.5
	p.ChurnOps, p.ChurnRate, p.P50Ms, p.P99Ms, p.MaxMs, p.Missed, p.ChurnCPUPct = 3000, 49.5, 2.5, 9.5, 12.5, 3, 4.5
	p.StaleAfterChurn, p.MissingAfterChurn, p.StaleAfterRestart, p.MissingAfterRestart = 1, 2, 4, 5
	p.ResyncsChurn, p.ResyncsRestart, p.RestartCPUPct, p.SettleS = 6, 7, 8.5, 9.5
	p.OvertakeChanges, p.ResyncsOvertake, p.OvertakeCPUPct, p.OvertakeSettleS, p.OvertakeCatchUpS = 50, 10, 11.5, 13.5, 14.5
	p.StaleAfterOvertake, p.MissingAfterOvertake, p.WatchOverflows = 15, 16, 17
	p.HeapMiB, p.RSSRestMiB, p.HeapRestMiB, p.CPUReadyS, p.CPUS, p.RunS = 18.5, 19.5, 20.5, 21.5, 22.5, 23.5
	p.Requests, p.Load1, p.Errors = map[string]int{"list nodes": 1, "watch nodes": 2}, 24.5, []string{"boom"}
	return p
}

// scalePointGolden is filledScalePoint's JSON: every key, in this order.
const scalePointGolden = `{"subject":"weftd","binary":"weftd","hosts":5000,"ready_s":1.5,"peers_observed":true,` +
	`"rss_mib":60.25,"idle_cpu_pct":0.5,"probe_packets_per_s":249.5,"ways_left":4999,"ways_s":14.5,"ways_left_unprobed":2,"ways_cpu_pct":3.5,"churn_ops":3000,"churn_rate_per_s":49.5,"update_p50_ms":2.5,` +
	`"update_p99_ms":9.5,"update_max_ms":12.5,"missed_updates":3,"churn_cpu_pct":4.5,"stale_after_churn":1,` +
	`"missing_after_churn":2,"stale_after_restart":4,"missing_after_restart":5,"resyncs_churn":6,` +
	`"resyncs_restart":7,"restart_cpu_pct":8.5,"settle_s":9.5,"overtake_changes":50,"resyncs_overtake":10,` +
	`"overtake_cpu_pct":11.5,"overtake_settle_s":13.5,"overtake_catch_up_s":14.5,"stale_after_overtake":15,` +
	`"missing_after_overtake":16,"watch_overflows":17,"heap_mib":18.5,"rss_rest_mib":19.5,"heap_rest_mib":20.5,` +
	`"cpu_ready_s":21.5,"cpu_s":22.5,"run_s":23.5,"requests":{"list nodes":1,"watch nodes":2},"load1":24.5,` +
	`"errors":["boom"]}`

// TestScalePointJSON: a ScalePoint with every field set marshals to the keys and
// order the committed reports have, and back to itself; one with none set leaves
// out exactly the omitempty fields.
func TestScalePointJSON(t *testing.T) {
	p := filledScalePoint()
	got, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != scalePointGolden {
		t.Errorf("filled ScalePoint marshals to\n%s\nwant\n%s", got, scalePointGolden)
	}
	var back ScalePoint
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	if again, _ := json.Marshal(back); !bytes.Equal(again, got) {
		t.Errorf("round trip changed the point:\n%s\nwant\n%s", again, got)
	}
	const zero = `{"subject":"","binary":"","hosts":0,"ready_s":0,"peers_observed":false,"rss_mib":0,` +
		`"idle_cpu_pct":0,"churn_ops":0,"churn_rate_per_s":0,"update_p50_ms":0,"update_p99_ms":0,` +
		`"update_max_ms":0,"missed_updates":0,"churn_cpu_pct":0,"stale_after_churn":0,"missing_after_churn":0,` +
		`"stale_after_restart":0,"missing_after_restart":0,"resyncs_churn":0,"resyncs_restart":0,` +
		`"restart_cpu_pct":0,"settle_s":0,"resyncs_overtake":0,"overtake_cpu_pct":0,"overtake_settle_s":0,` +
		`"overtake_catch_up_s":0,"stale_after_overtake":0,"missing_after_overtake":0}`
	if got, _ := json.Marshal(ScalePoint{}); string(got) != zero {
		t.Errorf("empty ScalePoint marshals to\n%s\nwant\n%s", got, zero)
	}
}
