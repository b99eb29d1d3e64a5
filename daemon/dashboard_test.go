package daemon

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// servedMetrics are the metrics GET /metrics serves (weft's own), by name, with their
// labels.
func servedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	d := &daemon{cfg: &Config{}, log: zap.NewNop(), probeRTT: newProbeRTT()}
	served := map[string][]string{}
	for _, c := range d.metricsCollectors() {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for desc := range ch {
			s := desc.String()
			m := descName.FindStringSubmatch(s)
			if m == nil {
				t.Fatalf("no fqName in %s", s)
			}
			var labels []string
			if l := descLabels.FindStringSubmatch(s); l != nil && l[1] != "" {
				labels = strings.Split(l[1], ",")
			}
			served[m[1]] = labels
		}
	}
	return served
}

var (
	metricName  = regexp.MustCompile(`\bweft_[a-z0-9_]+`)
	byLabels    = regexp.MustCompile(`\b(?:by|without) \(([^)]*)\)`)
	matcherName = regexp.MustCompile(`([a-z_]+)\s*(?:=~|!~|!=|=)\s*"`)
	// Labels Prometheus adds to every scraped series (and le, a histogram's bucket).
	scrapeLabels = []string{"instance", "job", "pod", "namespace", "node", "le"}
)

// TestDashboardMetrics holds deploy/grafana/weft-dashboard.json to weftd: every metric an
// expression names is one GET /metrics serves (a histogram's _bucket, _sum and _count
// included), every label it selects or groups by is one of those metrics' or the
// scrape's, and the dashboard shows what an operator looks at: peers reachable, ways,
// path changes, drops and relayed bytes.
func TestDashboardMetrics(t *testing.T) {
	served := servedMetrics(t)
	raw, err := os.ReadFile("../deploy/grafana/weft-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			names := metricName.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: %q names no weft metric", p.Title, tg.Expr)
			}
			labels := slices.Clone(scrapeLabels)
			for _, n := range names {
				base := n
				if _, ok := served[n]; !ok {
					for _, suf := range []string{"_bucket", "_sum", "_count"} {
						if b, ok := strings.CutSuffix(n, suf); ok {
							base = b
						}
					}
				}
				l, ok := served[base]
				if !ok {
					t.Errorf("panel %q: %s is not a metric weftd serves", p.Title, n)
					continue
				}
				used[base] = true
				labels = append(labels, l...)
			}
			var want []string
			for _, m := range byLabels.FindAllStringSubmatch(tg.Expr, -1) {
				for _, l := range strings.Split(m[1], ",") {
					want = append(want, strings.TrimSpace(l))
				}
			}
			for _, m := range matcherName.FindAllStringSubmatch(tg.Expr, -1) {
				want = append(want, m[1])
			}
			for _, l := range want {
				if !slices.Contains(labels, l) {
					t.Errorf("panel %q: label %q is none of %v's", p.Title, l, names)
				}
			}
		}
	}
	for _, m := range []string{"weft_peer_paths", "weft_peer_ways", "weft_path_changes_total", "weft_udp_dropped_packets_total",
		"weft_wireguard_dropped_packets_total", "weft_relay_forwarded_bytes_total"} {
		if !used[m] {
			t.Errorf("the dashboard shows no %s", m)
		}
	}
}
