// Package deploy holds weft's Kubernetes manifest; its test keeps weft.yml decodable and
// in step with weftd, the image and flannel's kube-flannel.yml.
package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"k8s.io/apimachinery/pkg/util/intstr"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
)

// objects of a manifest, by kind.
type objects struct {
	namespaces []*corev1.Namespace
	roles      []*rbacv1.ClusterRole
	bindings   []*rbacv1.ClusterRoleBinding
	accounts   []*corev1.ServiceAccount
	configMaps []*corev1.ConfigMap
	daemonSets []*appsv1.DaemonSet
	all        []runtime.Object
}

// decode reads a multi-document YAML manifest into typed objects. Decoding is strict: an
// unknown or duplicated field is an error, as a misspelt key would silently do nothing
// in a cluster.
func decode(t *testing.T, data []byte) *objects {
	t.Helper()
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	dec := codecs.UniversalDeserializer()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	o := &objects{}
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return o
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, gvk, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decode:\n%s\n: %v", doc, err)
		}
		o.all = append(o.all, obj)
		switch v := obj.(type) {
		case *corev1.Namespace:
			o.namespaces = append(o.namespaces, v)
		case *rbacv1.ClusterRole:
			o.roles = append(o.roles, v)
		case *rbacv1.ClusterRoleBinding:
			o.bindings = append(o.bindings, v)
		case *corev1.ServiceAccount:
			o.accounts = append(o.accounts, v)
		case *corev1.ConfigMap:
			o.configMaps = append(o.configMaps, v)
		case *appsv1.DaemonSet:
			o.daemonSets = append(o.daemonSets, v)
		default:
			t.Fatalf("unexpected kind %v", gvk)
		}
	}
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

func load(t *testing.T, path string) *objects {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, data)
}

// one returns the only element of s, failing the test otherwise.
func one[T any](t *testing.T, what string, s []T) T {
	t.Helper()
	if len(s) != 1 {
		t.Fatalf("%d %s, want 1", len(s), what)
	}
	return s[0]
}

// kubeFlannelRules is the least privilege weftd runs with (docs/design.md), which is
// kube-flannel's ClusterRole.
var kubeFlannelRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
}

func TestManifest(t *testing.T) {
	o := load(t, "weft.yml")

	ns := one(t, "namespaces", o.namespaces)
	if ns.Name != "kube-flannel" || ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace %s %v: want kube-flannel admitting privileged pods", ns.Name, ns.Labels)
	}

	role := one(t, "ClusterRoles", o.roles)
	if role.Name != "flannel" || !reflect.DeepEqual(role.Rules, kubeFlannelRules) {
		t.Errorf("ClusterRole %s rules %+v, want flannel with %+v", role.Name, role.Rules, kubeFlannelRules)
	}
	b := one(t, "ClusterRoleBindings", o.bindings)
	wantSubject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "flannel", Namespace: "kube-flannel"}}
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != role.Name || !reflect.DeepEqual(b.Subjects, wantSubject) {
		t.Errorf("ClusterRoleBinding %s: %+v -> %+v", b.Name, b.Subjects, b.RoleRef)
	}
	sa := one(t, "ServiceAccounts", o.accounts)
	if sa.Name != "flannel" || sa.Namespace != "kube-flannel" {
		t.Errorf("ServiceAccount %s/%s, want kube-flannel/flannel", sa.Namespace, sa.Name)
	}

	cm := one(t, "ConfigMaps", o.configMaps)
	if cm.Name != "kube-flannel-cfg" || cm.Namespace != "kube-flannel" {
		t.Errorf("ConfigMap %s/%s, want kube-flannel/kube-flannel-cfg", cm.Namespace, cm.Name)
	}
	if len(cm.Data) != 2 {
		t.Errorf("ConfigMap keys %v, want net-conf.json and cni-conf.json", keys(cm.Data))
	}
	cfg, err := lease.ParseConfig([]byte(cm.Data["net-conf.json"]))
	if err != nil {
		t.Errorf("net-conf.json: %v", err)
	} else if cfg.Network.String() != "10.244.0.0/16" {
		t.Errorf("net-conf.json Network %v, want kube-flannel's 10.244.0.0/16", cfg.Network)
	}
	checkCNIConf(t, cm.Data["cni-conf.json"])
	// deploy/README.md switches clusters with -l app.kubernetes.io/component!=net-config
	// to keep the cluster's own ConfigMap: only the ConfigMap may carry that label.
	for _, obj := range o.all {
		m, err := metaOf(obj)
		if err != nil {
			t.Fatal(err)
		}
		isCM := obj == runtime.Object(cm)
		if got := m["app.kubernetes.io/component"] == "net-config"; got != isCM {
			t.Errorf("%T: net-config label %v, want %v", obj, got, isCM)
		}
	}

	ds := one(t, "DaemonSets", o.daemonSets)
	checkDaemonSet(t, ds, sa.Name, cm.Name)
}

func keys(m map[string]string) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}

func metaOf(obj runtime.Object) (map[string]string, error) {
	type labelled interface{ GetLabels() map[string]string }
	l, ok := obj.(labelled)
	if !ok {
		return nil, errors.New("object without metadata")
	}
	return l.GetLabels(), nil
}

// checkCNIConf checks the conflist calls the flannel plugin, which the image ships.
func checkCNIConf(t *testing.T, s string) {
	t.Helper()
	var conf struct {
		Name       string `json:"name"`
		CNIVersion string `json:"cniVersion"`
		Plugins    []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(s), &conf); err != nil {
		t.Fatalf("cni-conf.json: %v", err)
	}
	if conf.Name == "" || conf.CNIVersion == "" || len(conf.Plugins) == 0 || conf.Plugins[0].Type != "flannel" {
		t.Errorf("cni-conf.json %+v: want a named conflist whose first plugin is flannel", conf)
	}
}

func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet, account, configMap string) {
	t.Helper()
	if ds.Namespace != "kube-flannel" {
		t.Errorf("DaemonSet in %q, want kube-flannel", ds.Namespace)
	}
	spec := ds.Spec.Template.Spec
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template's labels %v", k, v, ds.Spec.Template.Labels)
		}
	}
	// An update starts the new pod beside the old one, which hands the node over to it.
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType ||
		ru == nil || ru.MaxSurge == nil || ru.MaxSurge.String() != "1" || ru.MaxUnavailable == nil || ru.MaxUnavailable.String() != "0" {
		t.Errorf("updateStrategy %+v, want RollingUpdate with maxSurge 1, maxUnavailable 0", ds.Spec.UpdateStrategy)
	}
	if ds.Spec.Selector.MatchLabels["app"] == "flannel" {
		t.Errorf("selector app=flannel would overlap kube-flannel's DaemonSet")
	}
	if !spec.HostNetwork || spec.ServiceAccountName != account || spec.PriorityClassName != "system-node-critical" {
		t.Errorf("hostNetwork %v, serviceAccount %q, priority %q", spec.HostNetwork, spec.ServiceAccountName, spec.PriorityClassName)
	}
	if !reflect.DeepEqual(spec.Tolerations, []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}) {
		t.Errorf("tolerations %+v, want kube-flannel's (Exists, NoSchedule)", spec.Tolerations)
	}

	image := imageRef(t)
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	// hostPathAt returns the host path behind the container's mount at path.
	hostPathAt := func(c corev1.Container, path string) string {
		for _, m := range c.VolumeMounts {
			if strings.TrimSuffix(m.MountPath, "/") == path {
				if hp := volumes[m.Name].HostPath; hp != nil {
					return hp.Path
				}
				if cmv := volumes[m.Name].ConfigMap; cmv != nil {
					return "configmap:" + cmv.Name
				}
			}
		}
		return ""
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		if c.Image != image || c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s: image %q pull %q, want %q (built by make image) with IfNotPresent", c.Name, c.Image, c.ImagePullPolicy, image)
		}
		for _, m := range c.VolumeMounts {
			if _, ok := volumes[m.Name]; !ok {
				t.Errorf("%s mounts undefined volume %s", c.Name, m.Name)
			}
		}
	}

	// Init steps: the plugin into /opt/cni/bin, the conflist into /etc/cni/net.d.
	if len(spec.InitContainers) != 2 {
		t.Fatalf("%d init containers, want 2", len(spec.InitContainers))
	}
	for i, want := range []struct{ cmd, host string }{
		{"/opt/bin/weft-install /flannel /opt/cni/bin/flannel", "/opt/cni/bin"},
		{"/opt/bin/weft-install -mode 0644 /etc/kube-flannel/cni-conf.json /etc/cni/net.d/10-flannel.conflist", "/etc/cni/net.d"},
	} {
		c := spec.InitContainers[i]
		if got := strings.Join(append(c.Command, c.Args...), " "); got != want.cmd {
			t.Errorf("init %s runs %q, want %q", c.Name, got, want.cmd)
		}
		if got := hostPathAt(c, want.host); got != want.host {
			t.Errorf("init %s: %s is host path %q, want %q", c.Name, want.host, got, want.host)
		}
	}
	if got := hostPathAt(spec.InitContainers[1], "/etc/kube-flannel"); got != "configmap:"+configMap {
		t.Errorf("install-cni: /etc/kube-flannel is %q, want the ConfigMap %s", got, configMap)
	}

	c := one(t, "containers", spec.Containers)
	if !reflect.DeepEqual(c.Command, []string{"/opt/bin/weftd"}) {
		t.Errorf("command %q, want /opt/bin/weftd", c.Command)
	}
	var port string
	var kube bool
	for _, a := range c.Args {
		if p, ok := strings.CutPrefix(a, "--healthz-port="); ok {
			port = p
		}
		kube = kube || a == "--kube-subnet-mgr"
		if strings.HasPrefix(a, "--net-config-path") {
			t.Errorf("%s: the manifest relies on weftd's default net config path", a)
		}
	}
	if !kube || port == "" {
		t.Errorf("args %q: want --kube-subnet-mgr and --healthz-port", c.Args)
	}
	// A declared port of a host-network pod is a host port: the scheduler would keep
	// the new pod of a rolling update (maxSurge) off the node while the old one runs.
	if len(c.Ports) != 0 {
		t.Errorf("ports %+v declared: they are host ports, which keep the surge pod off its node", c.Ports)
	}
	for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != port {
			t.Errorf("probe %+v, want GET %s on --healthz-port=%s", probe, path, port)
		}
	}
	var env []string
	for _, e := range c.Env {
		ref := ""
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			ref = e.ValueFrom.FieldRef.FieldPath
		}
		env = append(env, e.Name+"="+e.Value+ref)
	}
	if want := []string{"POD_NAME=metadata.name", "POD_NAMESPACE=metadata.namespace"}; !reflect.DeepEqual(env, want) {
		t.Errorf("env %q, want only %q (weftd finds its node from its pod, as flanneld)", env, want)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil ||
		!reflect.DeepEqual(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW"}) {
		t.Errorf("securityContext %+v, want unprivileged with NET_ADMIN and NET_RAW", sc)
	}
	if got := hostPathAt(c, "/run/flannel"); got != "/run/flannel" {
		t.Errorf("/run/flannel is host path %q", got)
	}
	if got := hostPathAt(c, "/etc/kube-flannel"); got != "configmap:"+configMap {
		t.Errorf("/etc/kube-flannel is %q, want the ConfigMap (weftd's --net-config-path default)", got)
	}
	if got := hostPathAt(c, "/run/xtables.lock"); got != "/run/xtables.lock" ||
		volumes["xtables-lock"].HostPath.Type == nil || *volumes["xtables-lock"].HostPath.Type != corev1.HostPathFileOrCreate {
		t.Errorf("/run/xtables.lock is host path %q, want /run/xtables.lock, FileOrCreate", got)
	}
}

// imageRef is the image make image builds (cmd/weft-image's imageRepo, tagged with the
// Makefile's VERSION) pinned to the index digest weft.yml names first; every container
// must name exactly it. That the digest is the one make image built last is
// cmd/weft-image's TestPinned.
func imageRef(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "cmd", "weft-image", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	repo := regexp.MustCompile(`(?m)^const imageRepo = "([^"]+)"`).FindSubmatch(src)
	if repo == nil {
		t.Fatal("cmd/weft-image/main.go: no imageRepo constant")
	}
	mk, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	version := regexp.MustCompile(`(?m)^VERSION\s*\??:?=\s*(\S+)`).FindSubmatch(mk)
	if version == nil {
		t.Fatal("Makefile: no VERSION")
	}
	m := [][]byte{nil, []byte(string(repo[1]) + ":" + string(version[1]))}
	manifest, err := os.ReadFile("weft.yml")
	if err != nil {
		t.Fatal(err)
	}
	pinned := regexp.MustCompile(regexp.QuoteMeta(string(m[1])) + `@sha256:[0-9a-f]{64}`).Find(manifest)
	if pinned == nil {
		t.Fatalf("weft.yml does not name %s@sha256:<index digest>: run make image and make pin", m[1])
	}
	return string(pinned)
}

// TestManifestMatchesKubeFlannel compares weft.yml with the kube-flannel.yml of the
// flannel release the tests use (test/flannel), from the Go module cache: the shared
// objects must keep flannel's names and rules, the DaemonSet its host paths.
func TestManifestMatchesKubeFlannel(t *testing.T) {
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/flannel-io/flannel")
	cmd.Dir = filepath.Join("..", "test", "flannel")
	if testing.Short() {
		// Only what is cached already: a unit test fetches nothing.
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod")
	}
	out, err := cmd.Output()
	var mod struct{ Dir string }
	if err == nil {
		err = json.Unmarshal(out, &mod)
	}
	testenv.Need(t, err == nil && mod.Dir != "", "the flannel module (cd test/flannel && go mod download)")
	up := load(t, filepath.Join(mod.Dir, "Documentation", "kube-flannel.yml"))
	weft := load(t, "weft.yml")

	if a, b := one(t, "upstream ClusterRoles", up.roles), one(t, "ClusterRoles", weft.roles); a.Name != b.Name || !reflect.DeepEqual(a.Rules, b.Rules) {
		t.Errorf("ClusterRole %s %+v; kube-flannel's is %s %+v", b.Name, b.Rules, a.Name, a.Rules)
	}
	if !reflect.DeepEqual(one(t, "upstream ClusterRoles", up.roles).Rules, kubeFlannelRules) {
		t.Errorf("kube-flannel's ClusterRole changed: update kubeFlannelRules and docs/design.md")
	}
	if a, b := one(t, "upstream bindings", up.bindings), one(t, "bindings", weft.bindings); !reflect.DeepEqual(a.Subjects, b.Subjects) || a.RoleRef != b.RoleRef {
		t.Errorf("ClusterRoleBinding %+v -> %+v; kube-flannel's %+v -> %+v", b.Subjects, b.RoleRef, a.Subjects, a.RoleRef)
	}
	if a, b := one(t, "upstream ServiceAccounts", up.accounts), one(t, "ServiceAccounts", weft.accounts); a.Name != b.Name || a.Namespace != b.Namespace {
		t.Errorf("ServiceAccount %s/%s; kube-flannel's %s/%s", b.Namespace, b.Name, a.Namespace, a.Name)
	}
	upCM, cm := one(t, "upstream ConfigMaps", up.configMaps), one(t, "ConfigMaps", weft.configMaps)
	if upCM.Name != cm.Name || upCM.Namespace != cm.Namespace || len(upCM.Data) != len(cm.Data) {
		t.Errorf("ConfigMap %s/%s %v; kube-flannel's %s/%s %v", cm.Namespace, cm.Name, keys(cm.Data), upCM.Namespace, upCM.Name, keys(upCM.Data))
	}
	for k := range upCM.Data {
		if _, ok := cm.Data[k]; !ok {
			t.Errorf("ConfigMap lacks kube-flannel's key %s", k)
		}
	}
	// kube-flannel's own ConfigMap must work for weftd unchanged: that is the switch.
	if _, err := lease.ParseConfig([]byte(upCM.Data["net-conf.json"])); err != nil {
		t.Errorf("kube-flannel's net-conf.json: %v", err)
	}
	if upCM.Data["cni-conf.json"] != cm.Data["cni-conf.json"] {
		t.Errorf("cni-conf.json differs from kube-flannel's:\n%s\nkube-flannel:\n%s", cm.Data["cni-conf.json"], upCM.Data["cni-conf.json"])
	}

	upDS, ds := one(t, "upstream DaemonSets", up.daemonSets), one(t, "DaemonSets", weft.daemonSets)
	if upDS.Namespace != ds.Namespace {
		t.Errorf("DaemonSet namespace %s; kube-flannel's %s", ds.Namespace, upDS.Namespace)
	}
	hostPaths := func(d *appsv1.DaemonSet) map[string]string {
		m := map[string]string{}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.HostPath != nil {
				m[v.Name] = v.HostPath.Path
			}
		}
		return m
	}
	// weft's own: the TUN device and the UAPI sockets' directory of a userspace
	// WireGuard device, on nodes without the kernel module (deploy/README.md).
	b := hostPaths(ds)
	for name, path := range map[string]string{"dev-net-tun": "/dev/net/tun", "wireguard": "/run/wireguard"} {
		if b[name] != path {
			t.Errorf("host path %s is %q, want %s", name, b[name], path)
		}
		delete(b, name)
	}
	if a := hostPaths(upDS); !reflect.DeepEqual(a, b) {
		t.Errorf("host paths %v; kube-flannel's %v", b, a)
	}
	us, ws := upDS.Spec.Template.Spec, ds.Spec.Template.Spec
	if !reflect.DeepEqual(us.Tolerations, ws.Tolerations) || !reflect.DeepEqual(us.Affinity, ws.Affinity) ||
		us.PriorityClassName != ws.PriorityClassName || us.HostNetwork != ws.HostNetwork {
		t.Errorf("scheduling differs from kube-flannel's: tolerations %+v affinity %+v priority %s", ws.Tolerations, ws.Affinity, ws.PriorityClassName)
	}
	uc, wc := us.Containers[0], ws.Containers[0]
	if !reflect.DeepEqual(uc.SecurityContext, wc.SecurityContext) {
		t.Errorf("container security %+v; kube-flannel's %+v", wc.SecurityContext, uc.SecurityContext)
	}
	// kube-flannel declares its healthz port and names it in the probes; weft declares
	// none (docs/compatibility.md): the probes give the same number.
	if len(wc.Ports) != 0 {
		t.Errorf("ports %+v declared; want none", wc.Ports)
	}
	for _, probe := range []struct{ a, b *corev1.Probe }{{numberedProbe(uc.LivenessProbe, uc.Ports), wc.LivenessProbe},
		{numberedProbe(uc.ReadinessProbe, uc.Ports), wc.ReadinessProbe}} {
		if !reflect.DeepEqual(probe.a, probe.b) {
			t.Errorf("probe %+v; kube-flannel's %+v", probe.b, probe.a)
		}
	}
}

// numberedProbe is p with its HTTP port's name replaced by the number ports give it.
func numberedProbe(p *corev1.Probe, ports []corev1.ContainerPort) *corev1.Probe {
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.Type != intstr.String {
		return p
	}
	p = p.DeepCopy()
	for _, port := range ports {
		if port.Name == p.HTTPGet.Port.StrVal {
			p.HTTPGet.Port = intstr.FromInt32(port.ContainerPort)
		}
	}
	return p
}
