package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// mdTable returns the header cells and rows of the Markdown table of doc whose header
// line starts with headerPrefix; cells are trimmed.
func mdTable(t *testing.T, doc, headerPrefix string) (header []string, rows [][]string) {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, headerPrefix) })
	if i < 0 || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "|--") {
		t.Fatalf("%s has no table whose header starts %q", doc, headerPrefix)
	}
	split := func(l string) []string {
		f := strings.Split(strings.TrimSpace(l), "|")
		f = f[1 : len(f)-1]
		for j := range f {
			f[j] = strings.TrimSpace(f[j])
		}
		return f
	}
	header = split(lines[i])
	for _, l := range lines[i+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		rows = append(rows, split(l))
	}
	return header, rows
}

// columnKeys names each column of a table by its header, a "vs ..." column after the
// column it compares ("RTT median µs / vs kvxlan").
func columnKeys(header []string) []string {
	keys := make([]string, len(header))
	for i, h := range header {
		keys[i] = h
		if strings.HasPrefix(h, "vs ") && i > 0 {
			keys[i] = keys[i-1] + " / " + h
		}
	}
	return keys
}

// TestREADMEHowFastMatchesPerformance: every row of README's How fast table gives the
// figures of the same row of docs/performance.md's IPv4 table, and both name the same
// run.
func TestREADMEHowFastMatchesPerformance(t *testing.T) {
	rh, rrows := mdTable(t, "../README.md", "| subject | TCP Gbit/s |")
	ph, prows := mdTable(t, "../docs/performance.md", "| subject | TCP Gbit/s |")
	rk, pk := columnKeys(rh), columnKeys(ph)
	perf := map[string][]string{}
	for _, r := range prows {
		perf[r[0]] = r
	}
	for _, r := range rrows {
		p, ok := perf[r[0]]
		if !ok {
			t.Errorf("README's How fast row %q is not in docs/performance.md's table", r[0])
			continue
		}
		for i := 1; i < len(r) && i < len(rk); i++ {
			j := slices.Index(pk, rk[i])
			if j < 0 {
				t.Errorf("README's How fast column %q is not in docs/performance.md's table", rk[i])
				continue
			}
			if r[i] != p[j] {
				t.Errorf("%s, %s: README %s, docs/performance.md %s", r[0], rk[i], r[i], p[j])
			}
		}
	}

	// The run: README names the commit docs/performance.md's "Where and when" gives How fast.
	_, runs := mdTable(t, "../docs/performance.md", "| section | run | date | recorded in |")
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, howFast, _ := strings.Cut(string(readme), "## How fast")
	howFast, _, _ = strings.Cut(howFast, "| subject |")
	for _, r := range runs {
		if strings.HasPrefix(r[0], "[How fast]") {
			if !strings.Contains(howFast, "commit "+r[3]) || !strings.Contains(howFast, r[2]) {
				t.Errorf("README's How fast does not name the run docs/performance.md gives it: commit %s, %s", r[3], r[2])
			}
			return
		}
	}
	t.Error("docs/performance.md's Where and when has no How fast row")
}

// TestREADMEScaleMatchesReports: README's scale table gives, for each mode, the
// latest committed scale report's figures (docs/scale, docs/scale/probing,
// docs/scale/kube) for weftd and for flanneld, and names weftd's run by its date.
func TestREADMEScaleMatchesReports(t *testing.T) {
	var reps []ScaleReport
	for _, dir := range []string{"../docs/scale", "../docs/scale/probing", "../docs/scale/kube"} {
		data, err := os.ReadFile(filepath.Join(dir, "scale.json"))
		if err != nil {
			t.Fatal(err)
		}
		var rep ScaleReport
		if err := json.Unmarshal(data, &rep); err != nil {
			t.Fatal(err)
		}
		reps = append(reps, rep)
	}
	// latest is the point of subject at hosts in the newest report of mode having one.
	latest := func(mode, subject string, hosts int) (ScalePoint, ScaleReport, bool) {
		var best ScalePoint
		var from ScaleReport
		found := false
		for _, rep := range reps {
			if rep.Mode != mode {
				continue
			}
			for _, p := range rep.Points {
				if p.Subject == subject && p.Hosts == hosts && (!found || rep.Started.After(from.Started)) {
					best, from, found = p, rep, true
				}
			}
		}
		return best, from, found
	}

	header, rows := mdTable(t, "../README.md", "| peers | mode | run |")
	col := func(name string) int {
		i := slices.Index(header, name)
		if i < 0 {
			t.Fatalf("README's scale table has no column %q", name)
		}
		return i
	}
	mib := func(v float64) string { return fmt.Sprintf("%.1f MiB", v) }
	sec := func(v float64) string { return fmt.Sprintf("%.2f s", v) }
	for _, r := range rows {
		hosts, err := strconv.Atoi(strings.ReplaceAll(r[col("peers")], ",", ""))
		if err != nil {
			t.Errorf("scale row %q: peers: %v", r, err)
			continue
		}
		mode := map[string]string{"etcd": "", "Kubernetes": "kube"}[r[col("mode")]]
		for _, daemon := range []string{"weftd", "flanneld"} {
			p, rep, ok := latest(mode, daemon, hosts)
			if !ok {
				t.Errorf("no committed scale report has %s at %d hosts (%s)", daemon, hosts, r[col("mode")])
				continue
			}
			want := map[string]string{daemon + " ready": sec(p.ReadyS), daemon + " RSS": mib(p.RSSMiB)}
			if mode == "kube" {
				want[daemon+" RSS after 60 s"] = mib(p.RSSRestMiB)
			}
			for name, v := range want {
				if got := r[col(name)]; got != v {
					t.Errorf("README, %s peers %s: %s %s; the report of %s says %s",
						r[col("peers")], r[col("mode")], name, got, rep.Started.Format("2006-01-02"), v)
				}
			}
			if daemon == "weftd" && !regexp.MustCompile(rep.Started.Format("2006-01-02")).MatchString(r[col("run")]) {
				t.Errorf("README, %s peers %s: the run cell %q does not name weftd's run of %s",
					r[col("peers")], r[col("mode")], r[col("run")], rep.Started.Format("2006-01-02"))
			}
		}
	}
}
