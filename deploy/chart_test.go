package deploy

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

const chartDir = "chart/weft"

// renderChart renders a chart as `helm template` does (helm's install action, dry run,
// client only) into the namespace kube-flannel and returns the manifest.
func renderChart(t *testing.T, dir string, vals map[string]any) (string, error) {
	t.Helper()
	ch, err := loader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = "weft", "kube-flannel"
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// mustRender renders weft's chart with vals, failing the test on an error.
func mustRender(t *testing.T, vals map[string]any) *objects {
	t.Helper()
	m, err := renderChart(t, chartDir, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return decode(t, []byte(m))
}

func TestChartLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"defaults":       nil,
		"flannel values": readValues(t, "testdata/flannel-values.yaml"),
	} {
		t.Run(name, func(t *testing.T) {
			l := action.NewLint()
			l.Namespace = "kube-flannel"
			res := l.Run([]string{chartDir}, vals)
			if res.TotalChartsLinted != 1 {
				t.Errorf("%d charts linted, want 1", res.TotalChartsLinted)
			}
			for _, m := range res.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("lint: %s", m)
				} else {
					t.Logf("lint: %s", m)
				}
			}
			for _, err := range res.Errors {
				t.Errorf("lint error: %v", err)
			}
		})
	}
}

// TestChartDefaultsAreWeftYML renders the chart with its defaults and compares every
// object with deploy/weft.yml's, field by field: the same objects, names, labels, specs
// and config (net-conf.json compared as JSON). The one difference is the Namespace:
// weft.yml makes kube-flannel, the chart installs into the release's namespace and,
// as flannel's chart, makes none (helm install --namespace kube-flannel; deploy/README.md).
func TestChartDefaultsAreWeftYML(t *testing.T) {
	got := canonical(t, mustRender(t, nil).all)
	want := canonical(t, load(t, "weft.yml").all)
	if ns, ok := want["Namespace//kube-flannel"]; !ok {
		t.Fatalf("weft.yml has no Namespace kube-flannel")
	} else if !strings.Contains(ns, `"pod-security.kubernetes.io/enforce":"privileged"`) {
		t.Errorf("weft.yml's Namespace does not admit privileged pods: %s", ns)
	}
	delete(want, "Namespace//kube-flannel")
	for _, k := range unionKeys(want, got) {
		if got[k] != want[k] {
			g, w := fromFirstDifference(got[k], want[k])
			t.Errorf("%s differs\n chart:    %s\n weft.yml: %s", k, g, w)
		}
	}
}

// canonical maps kind/namespace/name to the object's JSON, with each JSON document
// in a ConfigMap re-encoded so that layout and key order do not count.
func canonical(t *testing.T, objs []runtime.Object) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, obj := range objs {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			cm = cm.DeepCopy()
			for k, v := range cm.Data {
				if strings.HasSuffix(k, ".json") {
					cm.Data[k] = normJSON(t, v)
				}
			}
			obj = cm
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			t.Fatal(err)
		}
		kind := fmt.Sprintf("%T", obj)
		kind = kind[strings.LastIndex(kind, ".")+1:]
		key := kind + "/" + m.GetNamespace() + "/" + m.GetName()
		if _, dup := out[key]; dup {
			t.Errorf("%s twice", key)
		}
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		out[key] = string(b)
	}
	return out
}

// normJSON re-encodes a JSON document (keys sorted, no spaces).
func normJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func unionKeys(ms ...map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range ms {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}

// fromFirstDifference shortens two differing strings to where they part, with some
// context before it ("(none)" for a missing one).
func fromFirstDifference(a, b string) (string, string) {
	if a == "" || b == "" {
		return orNone(a), orNone(b)
	}
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(0, i-60)
	return "..." + a[from:min(len(a), i+100)], "..." + b[from:min(len(b), i+100)]
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// readValues reads a values file as helm does.
func readValues(t *testing.T, path string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}
