package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
)

// chartValuePaths are the chart's values as dotted paths: the leaves of values.yaml
// (a list or an empty map is a leaf) and every value the templates read (.Values.x.y,
// $f.x for .Values.flannel.x, $img.x for .Values.flannel.image.x), less those that
// only lead to others.
func chartValuePaths(t *testing.T) []string {
	t.Helper()
	vals, err := chartutil.ReadValuesFile("chart/weft/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
				walk(prefix+k+".", sub)
				continue
			}
			set[prefix+k] = true
		}
	}
	walk("", vals)

	tpls, err := filepath.Glob("chart/weft/templates/*")
	if err != nil || len(tpls) == 0 {
		t.Fatalf("no templates: %v", err)
	}
	refs := regexp.MustCompile(`(\.Values|\$f|\$img)\.([A-Za-z0-9_.]*[A-Za-z0-9_])`)
	for _, p := range tpls {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range refs.FindAllStringSubmatch(string(b), -1) {
			set[map[string]string{".Values": "", "$f": "flannel.", "$img": "flannel.image."}[m[1]]+m[2]] = true
		}
	}
	var out []string
	for p := range set {
		inner := false
		for q := range set {
			inner = inner || strings.HasPrefix(q, p+".")
		}
		if !inner {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// chartDocValues reads the first column of the chart README's table of values: a
// name starting with "." is a sibling of the full name before it (`flannel.image.repository`,
// `.tag`). ignored says which names the row says are accepted and ignored.
func chartDocValues(t *testing.T) (names []string, ignored map[string]bool) {
	t.Helper()
	b, err := os.ReadFile("chart/weft/README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	i := slices.Index(lines, "| value of flannel's chart | in weft's chart |")
	if i < 0 || !strings.HasPrefix(lines[i+1], "|--") {
		t.Fatal("deploy/chart/weft/README.md has no table of values")
	}
	ignored = map[string]bool{}
	span := regexp.MustCompile("`([^`]+)`")
	for _, l := range lines[i+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(l, "|")
		if len(cells) < 4 {
			t.Fatalf("values table row %q: want 2 cells", l)
		}
		parent := ""
		for _, m := range span.FindAllStringSubmatch(cells[1], -1) {
			name := m[1]
			if strings.HasPrefix(name, ".") {
				if parent == "" {
					t.Errorf("values table row %q: %s follows no full name", l, name)
				}
				name = parent + name
			} else if j := strings.LastIndex(name, "."); j > 0 {
				parent = name[:j]
			}
			names = append(names, name)
			if strings.Contains(cells[2], "accepted and ignored") {
				ignored[name] = true
			}
		}
	}
	return names, ignored
}

// TestChartValuesDocumented: the chart README's table of values covers every value
// values.yaml holds and the templates read (a documented map covers what is under
// it), names each once, and names nothing the chart does not have, but for values of
// flannel's chart that it says weft accepts and ignores.
func TestChartValuesDocumented(t *testing.T) {
	code := chartValuePaths(t)
	doc, ignored := chartDocValues(t)
	count := map[string]int{}
	for _, d := range doc {
		count[d]++
		if count[d] == 2 {
			t.Errorf("deploy/chart/weft/README.md lists %s twice", d)
		}
	}
	for _, p := range code {
		if !slices.ContainsFunc(doc, func(d string) bool { return p == d || strings.HasPrefix(p, d+".") }) {
			t.Errorf("deploy/chart/weft/README.md's table lacks the value %s", p)
		}
	}
	for _, d := range doc {
		if ignored[d] {
			continue
		}
		if !slices.ContainsFunc(code, func(p string) bool { return p == d || strings.HasPrefix(p, d+".") }) {
			t.Errorf("deploy/chart/weft/README.md lists the value %s, which the chart neither holds nor reads", d)
		}
	}
}
