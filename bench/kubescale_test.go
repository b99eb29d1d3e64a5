package bench

import (
	"maps"
	"strings"
	"testing"
)

func TestCountRequests(t *testing.T) {
	for _, tc := range []struct {
		name, log string
		want      map[string]int
	}{
		{"empty", "", map[string]int{}},
		{"a watch counted once", `{"auditID":"a","stage":"ResponseStarted","verb":"watch","objectRef":{"resource":"nodes"}}
{"auditID":"b","stage":"ResponseComplete","verb":"list","objectRef":{"resource":"nodes"}}
{"auditID":"a","stage":"ResponseComplete","verb":"watch","objectRef":{"resource":"nodes"}}
`, map[string]int{"watch nodes": 1, "list nodes": 1}},
		{"subresource and no object", `{"auditID":"c","verb":"patch","objectRef":{"resource":"nodes","subresource":"status"}}
{"auditID":"d","verb":"get"}
not json
{"verb":"get"}
`, map[string]int{"patch nodes/status": 1, "get -": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := countRequests(strings.NewReader(tc.log))
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestKubeReport: a Kubernetes-mode report has its own columns (RSS at rest,
// requests per minute by verb) and lists the requests.
func TestKubeReport(t *testing.T) {
	r := &ScaleReport{Mode: "kube", IdleS: 60, ChurnS: 60, Rate: 50, Points: []ScalePoint{{
		Subject: "weftd", Hosts: 5000, ScaleReady: ScaleReady{ReadyS: 1.3, RSSMiB: 80},
		ScaleChurn: ScaleChurn{ChurnOps: 10, P50Ms: 5, P99Ms: 50},
		ScaleKube: ScaleKube{RSSRestMiB: 90, RunS: 120,
			Requests: map[string]int{"list nodes": 1, "watch nodes": 4, "patch nodes/status": 2, "get pods": 1}},
	}}}
	var b strings.Builder
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{"Kubernetes mode", "| RSS MiB at rest |", "| 90.0 |", "| 0.5 | 2.0 | 0.5 | 1.0 |",
		"weftd at 5000 Nodes, 120 s run: get pods 1, list nodes 1, patch nodes/status 2, watch nodes 4"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
