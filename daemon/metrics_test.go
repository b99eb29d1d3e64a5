package daemon

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
)

// TestMetricsLint checks the metric names, types and help texts against Prometheus'
// conventions (promlint) and that a daemon that has not started answers /metrics with
// what it knows: the build and that it is not ready yet, and why.
func TestMetricsLint(t *testing.T) {
	d := &daemon{cfg: &Config{ForwardRules: true, IPMasq: true}, log: zap.NewNop()}
	c := newWeftCollector(d)
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP weft_ready 1 when /readyz answers 200: lease held, data path running, watch current.
# TYPE weft_ready gauge
weft_ready{reason="no_lease_source"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "weft_ready", "weft_firewall_repairs_total"); err != nil {
		t.Error(err)
	}
	// No firewall yet: no repair counter to report.
	if n := testutil.CollectAndCount(c, "weft_firewall_repairs_total"); n != 0 {
		t.Errorf("%d weft_firewall_repairs_total samples before the firewall is set up, want 0", n)
	}
	if n := testutil.CollectAndCount(c, "weft_build_info"); n != 1 {
		t.Errorf("%d weft_build_info samples, want 1", n)
	}

	rec := httptest.NewRecorder()
	d.healthzMux().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d %s", rec.Code, body)
	}
	for _, s := range []string{"weft_build_info{", "go_goroutines ", "process_cpu_seconds_total "} {
		if !strings.Contains(string(body), s) {
			t.Errorf("/metrics lacks %q:\n%s", s, body)
		}
	}
}
