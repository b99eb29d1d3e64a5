package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestScaleSizes(t *testing.T) {
	for _, tc := range []struct {
		hosts int
		sizes string
		want  []int
		err   bool
	}{
		{5000, "", []int{100, 500, 1000, 2000, 5000}, false},
		{500, "", []int{100, 500}, false},
		{50, "", []int{50}, false},
		{0, "1000, 100", []int{100, 1000}, false},
		{0, "100,x", nil, true},
		{0, "0", nil, true},
		{9000, "", nil, true},
	} {
		got, err := scaleSizes(tc.hosts, tc.sizes)
		if tc.err {
			if !errors.Is(err, errUsage) {
				t.Errorf("scaleSizes(%d, %q) = %v, %v; want a usage error", tc.hosts, tc.sizes, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("scaleSizes(%d, %q) = %v, %v; want %v", tc.hosts, tc.sizes, got, err, tc.want)
		}
	}
}

// TestScaleReportFrom renders an earlier run's scale.json again, table and files,
// with the columns of this version; a file that is not a report is an error.
func TestScaleReportFrom(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "old.json")
	if err := os.WriteFile(in, []byte(`{"backend":"vxlan","rate_per_s":50,"points":[{"subject":"weftd","hosts":5000,
		"ready_s":0.9,"peers_observed":true,"churn_ops":3000,"churn_rate_per_s":49.5,"update_p50_ms":1.5,"update_p99_ms":9,
		"resyncs_churn":0,"resyncs_restart":0,"resyncs_overtake":1,"overtake_changes":50,"overtake_catch_up_s":0.4,
		"overtake_settle_s":1,"settle_s":0}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	if err := scaleCmd(context.Background(), []string{"--report-from", in, "--out", filepath.Join(dir, "r")}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "r", "scale.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := "| weftd | 5000 | 0.90 |"
	if !strings.Contains(out.String(), "49.5") || !strings.Contains(string(md), row) || !strings.Contains(string(md), "| 0.40 |") {
		t.Fatalf("table:\n%s\nscale.md:\n%s", out.String(), md)
	}
	if err := os.WriteFile(in, []byte(`not json`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := scaleCmd(context.Background(), []string{"--report-from", in}, &out, &errOut); err == nil {
		t.Fatal("a file that is not JSON was rendered")
	}
}

func TestWeftdEnvFlag(t *testing.T) {
	for _, tc := range []struct {
		in       string
		name     string
		env      []string
		wantFail bool
	}{
		{in: "weftd-noprobe=WEFT_PROBE=false", name: "weftd-noprobe", env: []string{"WEFT_PROBE=false"}},
		{in: "slow=WEFT_PROBE_RATE=50,WEFT_PROBE_INTERVAL=10s", name: "slow", env: []string{"WEFT_PROBE_RATE=50", "WEFT_PROBE_INTERVAL=10s"}},
		{in: "WEFT_PROBE=false", wantFail: true}, // no name
		{in: "x=", wantFail: true},
		{in: "x=WEFT_PROBE", wantFail: true},
		{in: "a/b=WEFT_PROBE=false", wantFail: true},
		{in: "x==false", wantFail: true},
	} {
		var f weftdEnvFlag
		err := f.Set(tc.in)
		if tc.wantFail {
			if err == nil {
				t.Errorf("Set(%q) = nil, want an error (got %v)", tc.in, f)
			}
			continue
		}
		if err != nil || len(f) != 1 || f[0].name != tc.name || !slices.Equal(f[0].env, tc.env) {
			t.Errorf("Set(%q) = %v, %v; want %s with %v", tc.in, f, err, tc.name, tc.env)
		}
	}
}
