package checkconfig

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// What weft's own manifest (deploy/weft.yml) and chart give weftd's container;
// TestWeftDefaults holds them to deploy/weft.yml.
var (
	WeftArgs        = []string{"--ip-masq", "--kube-subnet-mgr", "--healthz-port=8081"}
	WeftTolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	WeftResources   = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("96Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("192Mi")},
	}
	// WeftEnv are the variables weft.yml sets from the pod (weftd finds its node
	// from them).
	WeftEnv = []string{"POD_NAME", "POD_NAMESPACE"}
)

// weftDefaults are flanneld's variables that weftd reads, with the value weftd takes
// when they are unset.
var weftDefaults = map[string]string{"EVENT_QUEUE_DEPTH": "5000", "CONT_WHEN_CACHE_NOT_READY": "false"}

// ErrNoDaemonSet is returned when the input holds no DaemonSet with a flanneld
// container.
var ErrNoDaemonSet = errors.New("no DaemonSet running flanneld")

// Fates of a setting.
const (
	Kept    = "kept"    // weft's manifest and chart do the same
	Carry   = "carry"   // weft's do not: set it as Where says
	Refused = "refused" // weftd refuses it (Why)
	Ignored = "ignored" // nothing to carry (weft's own image, flanneld's paths)
)

// Setting is one setting of a kube-flannel DaemonSet and what weft does with it.
type Setting struct {
	Kind  string `json:"kind"` // arg, env, toleration, nodeSelector, affinity, resources, image
	Value string `json:"value"`
	Fate  string `json:"fate"`
	// Where says what to put in weft's chart values (and weft.yml) to keep it.
	Where string `json:"where,omitempty"`
	// Why says why weftd refuses it.
	Why string `json:"why,omitempty"`
}

// ReadDaemonSet finds the DaemonSet whose containers run flanneld in a manifest of one
// or more YAML documents (kube-flannel.yml, or `kubectl get ds -o yaml`).
func ReadDaemonSet(r io.Reader) (*appsv1.DaemonSet, error) {
	dec := scheme.Codecs.UniversalDeserializer()
	yr := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return nil, ErrNoDaemonSet
		}
		if err != nil {
			return nil, fmt.Errorf("read the manifest: %w", err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			continue // a kind this binary does not know: not the DaemonSet
		}
		if ds, ok := obj.(*appsv1.DaemonSet); ok && flanneldContainer(ds) != nil {
			return ds, nil
		}
	}
}

// flanneldContainer is the container of ds that runs flanneld (nil: none).
func flanneldContainer(ds *appsv1.DaemonSet) *corev1.Container {
	for i, c := range ds.Spec.Template.Spec.Containers {
		if slices.ContainsFunc(c.Command, func(s string) bool { return strings.HasSuffix(s, "flanneld") }) {
			return &ds.Spec.Template.Spec.Containers[i]
		}
	}
	return nil
}

// FromDaemonSet lists the settings of kube-flannel's DaemonSet ds: each argument of
// flanneld, each FLANNELD_* and other variable, the tolerations, the node selector
// and affinity, and the resources; and what weft does with each. check tells
// whether weftd takes an argument (weftd's own flag parser; nil error: it does).
func FromDaemonSet(ds *appsv1.DaemonSet, check func(arg string) error) ([]Setting, error) {
	c := flanneldContainer(ds)
	if c == nil {
		return nil, fmt.Errorf("DaemonSet %s/%s: %w", ds.Namespace, ds.Name, ErrNoDaemonSet)
	}
	var out []Setting
	out = append(out, Setting{Kind: "image", Value: c.Image, Fate: Ignored, Where: "weft runs its own image (flannel.image in the chart)"})
	for _, a := range c.Args {
		out = append(out, argSetting(a, check))
	}
	for _, e := range c.Env {
		out = append(out, envSetting(e, check))
	}
	spec := ds.Spec.Template.Spec
	for _, t := range spec.Tolerations {
		s := Setting{Kind: "toleration", Value: tolerationString(t), Fate: Kept}
		if !slices.ContainsFunc(WeftTolerations, func(w corev1.Toleration) bool { return w.MatchToleration(&t) && t.MatchToleration(&w) }) {
			s.Fate, s.Where = Carry, "chart: flannel.tolerations (weft.yml: spec.template.spec.tolerations); the chart's default tolerates NoSchedule only"
		}
		out = append(out, s)
	}
	keys := make([]string, 0, len(spec.NodeSelector))
	for k := range spec.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, Setting{Kind: "nodeSelector", Value: k + "=" + spec.NodeSelector[k], Fate: Carry,
			Where: "chart: flannel.nodeSelector (weft.yml: spec.template.spec.nodeSelector)"})
	}
	if a := spec.Affinity; a != nil && !linuxOnly(a) {
		out = append(out, Setting{Kind: "affinity", Value: "other than kubernetes.io/os=linux", Fate: Carry,
			Where: "weft.yml: spec.template.spec.affinity (the chart keeps weft.yml's Linux-only node affinity)"})
	}
	if !equality.Semantic.DeepEqual(c.Resources, WeftResources) && (len(c.Resources.Requests) > 0 || len(c.Resources.Limits) > 0) {
		out = append(out, Setting{Kind: "resources", Value: resourcesString(c.Resources), Fate: Carry,
			Where: "chart: flannel.resources; weft's default is " + resourcesString(WeftResources) + " (measured with 5,000 Nodes: deploy/README.md, Memory)"})
	}
	return out, nil
}

// argSetting is what weft does with flanneld's argument a.
func argSetting(a string, check func(string) error) Setting {
	s := Setting{Kind: "arg", Value: a}
	name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
	switch {
	case slices.Contains(WeftArgs, a):
		s.Fate = Kept
	case name == "healthz-port":
		s.Fate, s.Where = Carry, "chart: flannel.healthz.port (weft.yml passes --healthz-port=8081, with the probes)"
	case check != nil && check(a) != nil:
		s.Fate, s.Why = Refused, check(a).Error()
	default:
		s.Fate, s.Where = Carry, "chart: flannel.args (keep --ip-masq and --kube-subnet-mgr in it); weft.yml: the weft container's args"
	}
	return s
}

// envSetting is what weft does with variable e of flanneld's container.
func envSetting(e corev1.EnvVar, check func(string) error) Setting {
	v := e.Value
	if e.ValueFrom != nil {
		v = "(from the pod or a reference)"
	}
	s := Setting{Kind: "env", Value: e.Name + "=" + v}
	flag, isFlag := strings.CutPrefix(e.Name, "FLANNELD_")
	switch {
	case slices.Contains(WeftEnv, e.Name):
		s.Fate = Kept
	case e.ValueFrom == nil && weftDefaults[e.Name] == e.Value:
		s.Fate, s.Where = Kept, "weftd's default too"
	case isFlag && e.ValueFrom == nil:
		arg := "--" + strings.ToLower(strings.ReplaceAll(flag, "_", "-")) + "=" + e.Value
		if check != nil && check(arg) != nil {
			s.Fate, s.Why = Refused, check(arg).Error()
			break
		}
		s.Fate, s.Where = Carry, "weftd reads it as flanneld does: weft.yml: the weft container's env; the chart has no env value, so pass "+arg+" in flannel.args"
	default:
		s.Fate, s.Where = Carry, "weft.yml: the weft container's env (the chart has no env value)"
	}
	return s
}

// linuxOnly says the affinity is kube-flannel's and weft's: Linux nodes only.
func linuxOnly(a *corev1.Affinity) bool {
	if a.PodAffinity != nil || a.PodAntiAffinity != nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	return len(terms) == 1 && len(terms[0].MatchExpressions) == 1 && len(terms[0].MatchFields) == 0 &&
		terms[0].MatchExpressions[0].Key == "kubernetes.io/os" && slices.Equal(terms[0].MatchExpressions[0].Values, []string{"linux"})
}

func tolerationString(t corev1.Toleration) string {
	var parts []string
	for _, kv := range [][2]string{{"key", t.Key}, {"operator", string(t.Operator)}, {"value", t.Value}, {"effect", string(t.Effect)}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	return strings.Join(parts, " ")
}

func resourcesString(r corev1.ResourceRequirements) string {
	list := func(l corev1.ResourceList) string {
		var parts []string
		for _, k := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := l[k]; ok {
				parts = append(parts, string(k)+" "+q.String())
			}
		}
		if len(parts) == 0 {
			return "none"
		}
		return strings.Join(parts, ", ")
	}
	return fmt.Sprintf("requests %s; limits %s", list(r.Requests), list(r.Limits))
}

// WriteSettings prints the settings, then how many weft refuses.
func WriteSettings(w io.Writer, settings []Setting) {
	fmt.Fprintln(w, "\nkube-flannel's DaemonSet, setting by setting:")
	refused := 0
	for _, s := range settings {
		fmt.Fprintf(w, "  - %-12s %s: %s", s.Kind, s.Value, s.Fate)
		switch {
		case s.Why != "":
			fmt.Fprintf(w, " (%s)", s.Why)
			refused++
		case s.Where != "":
			fmt.Fprintf(w, ": %s", s.Where)
		}
		fmt.Fprintln(w)
	}
	if refused > 0 {
		fmt.Fprintf(w, "\n%d settings weftd refuses\n", refused)
	}
}
