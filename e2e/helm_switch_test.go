package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/weftnet/weft/bench/kubecluster"
)

// TestHelmFromFlannelChart runs a cluster on flannel's own chart (chart/kube-flannel
// v0.28.10, installed with helm's Go module from a values file) and switches it to
// weft's chart with the same values file, as deploy/README.md says: helm uninstall
// flannel, helm install weft. The running pods keep their addresses and keep talking
// (ping every 10 ms throughout: the loss is reported), and net-conf.json is the same.
// Then the way back, as deploy/README.md and docs/quickstart.md say: helm uninstall
// weft, helm install flannel's chart with the same values file, weft-cleanup.yml once;
// the pods keep their addresses and talking again, net-conf.json is the same, and
// weft's rules are gone while flanneld's are there.
func TestHelmFromFlannelChart(t *testing.T) {
	image := daemonSetPrereqs(t)
	flannelTar, modDir := flannelTestImage(t, image)
	start := time.Now()
	c := kubecluster.Start(t, kubecluster.Options{RepoRoot: "..", Images: []string{image, flannelTar}})
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
	if _, err := c.Admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := helmConfig(t, c, ns.Name)
	file := fmt.Sprintf("podCidr: %q\nflannel:\n  backend: vxlan\n", kubecluster.ClusterCIDR)

	// flannel's chart, with the test's flanneld image (a test-only post-render step
	// points the init steps at weft-install, as the image has no cp).
	flannelChart, err := loader.Load(filepath.Join(modDir, "chart", "kube-flannel"))
	if err != nil {
		t.Fatal(err)
	}
	vals := helmValuesFile(t, file)
	vals["flannel"].(map[string]any)["image"] = map[string]any{"repository": "registry.weft.test/flannel", "tag": "v0.28.10"}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.Wait, inst.Timeout = "flannel", ns.Name, true, 4*time.Minute
	inst.PostRenderer = flannelImageRenderer{}
	if _, err := inst.RunWithContext(ctx, flannelChart, vals); err != nil {
		logNetPods(t, ctx, c.Admin)
		t.Fatalf("helm install flannel's chart: %v", err)
	}
	checkNodes(t, ctx, c)
	checkDaemonSet(t, ctx, c.Admin, "kube-flannel-ds")
	before := clusterNetConf(t, ctx, c)
	checkConfigAccepts(t, ctx, before) // deploy/README.md's first command of the switch
	a := runPod(t, ctx, c, "pod-a", c.Nodes[0])
	b := runPod(t, ctx, c, "pod-b", c.Nodes[1])
	pingPod(t, ctx, c.Admin, a, b)
	for _, n := range c.Nodes {
		if rules := iptablesSave(t, ctx, n); !strings.Contains(rules, "-j FLANNEL-FWD") {
			t.Fatalf("node %s runs flanneld without its FLANNEL-FWD chain:\n%s", n.Name, rules)
		}
	}
	t.Logf("flannel's chart: nodes, DaemonSet and pods ready %v after start", time.Since(start).Round(time.Millisecond))

	// The switch.
	p := startPing(t, ctx, a, b)
	defer p.kill()
	u := action.NewUninstall(cfg)
	u.Wait, u.Timeout = true, 2*time.Minute
	if _, err := u.Run("flannel"); err != nil {
		t.Fatalf("helm uninstall flannel: %v", err)
	}
	awaitNoPods(t, ctx, c, "app=flannel")
	weftChart, err := loader.Load(filepath.Join("..", "deploy", "chart", "weft"))
	if err != nil {
		t.Fatal(err)
	}
	inst = action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.Wait, inst.Timeout = "weft", ns.Name, true, 4*time.Minute
	if _, err := inst.RunWithContext(ctx, weftChart, helmValuesFile(t, file)); err != nil {
		logNetPods(t, ctx, c.Admin)
		t.Fatalf("helm install weft: %v", err)
	}
	checkDaemonSet(t, ctx, c.Admin, "weft")
	sent, received, gap := p.stop(t, ctx)
	t.Logf("flannel's chart -> weft's: %d pings every 10 ms, %d answered, longest gap %v; %v after start",
		sent, received, gap, time.Since(start).Round(time.Millisecond))
	if received == 0 {
		t.Errorf("no ping answered during the switch")
	}
	if after := clusterNetConf(t, ctx, c); after != before {
		t.Errorf("net-conf.json changed in the switch:\n%s\n->\n%s", before, after)
	}
	for _, want := range []pod{a, b} {
		got, err := c.Admin.CoreV1().Pods("default").Get(ctx, want.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.PodIP != want.ip.String() || got.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s: address %s (was %s), restarts %d", want.name, got.Status.PodIP, want.ip, got.Status.ContainerStatuses[0].RestartCount)
		}
	}
	// weftd took over the rules: flanneld's chains are gone, weft's are there.
	for _, n := range c.Nodes {
		rules := iptablesSave(t, ctx, n)
		if strings.Contains(rules, "FLANNEL-") || !strings.Contains(rules, "-j WEFT-FWD") {
			t.Errorf("node %s after the switch: want weft's forward chain and none of flanneld's:\n%s", n.Name, rules)
		}
	}
	pingPod(t, ctx, c.Admin, a, b)
	pingPod(t, ctx, c.Admin, b, a)
	tcpPods(t, a, b, 8<<20)
	d := runPod(t, ctx, c, "pod-c", c.Nodes[0])
	pingPod(t, ctx, c.Admin, d, b)

	// The way back, as the docs say: helm uninstall weft, helm install flannel's chart
	// with the same values file, then weft-cleanup.yml (weftd cleanup --firewall-only
	// on every node) for the rules flanneld does not know.
	back := time.Now()
	p = startPing(t, ctx, a, b)
	defer p.kill()
	u = action.NewUninstall(cfg)
	u.Wait, u.Timeout = true, 2*time.Minute
	if _, err := u.Run("weft"); err != nil {
		t.Fatalf("helm uninstall weft: %v", err)
	}
	awaitNoPods(t, ctx, c, "app=weft")
	inst = action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.Wait, inst.Timeout = "flannel", ns.Name, true, 4*time.Minute
	inst.PostRenderer = flannelImageRenderer{}
	vals = helmValuesFile(t, file)
	vals["flannel"].(map[string]any)["image"] = map[string]any{"repository": "registry.weft.test/flannel", "tag": "v0.28.10"}
	if _, err := inst.RunWithContext(ctx, flannelChart, vals); err != nil {
		logNetPods(t, ctx, c.Admin)
		t.Fatalf("helm install flannel's chart again: %v", err)
	}
	checkDaemonSet(t, ctx, c.Admin, "kube-flannel-ds")
	for _, n := range c.Nodes {
		if weftFirewall(t, ctx, n) == "" {
			t.Fatalf("node %s: weft's rules gone before weft-cleanup.yml ran: the check below would prove nothing", n.Name)
		}
	}
	runWeftCleanup(t, ctx, c, "")
	sent, received, gap = p.stop(t, ctx)
	t.Logf("weft's chart -> flannel's and weft-cleanup.yml: %d pings every 10 ms, %d answered, longest gap %v; took %v",
		sent, received, gap, time.Since(back).Round(time.Millisecond))
	if received == 0 {
		t.Errorf("no ping answered during the switch back")
	}
	if after := clusterNetConf(t, ctx, c); after != before {
		t.Errorf("net-conf.json changed in the switch back:\n%s\n->\n%s", before, after)
	}
	checkBackOnFlannel(t, ctx, c, a, b, d)
	pingPod(t, ctx, c.Admin, a, b)
	pingPod(t, ctx, c.Admin, b, d)
	tcpPods(t, b, a, 1<<20)
	e := runPod(t, ctx, c, "pod-e", c.Nodes[1])
	pingPod(t, ctx, c.Admin, e, a)
	t.Logf("back on flannel's chart: pod-e %s (started by flanneld's subnet.env) pings pod-a; %v after start", e.ip, time.Since(start).Round(time.Millisecond))
}

// runWeftCleanup runs deploy/weft-cleanup.yml as the docs say: apply it (with image,
// when not "", as its DaemonSet's image), wait until its DaemonSet is ready on every
// node (rollout status), then delete every object it made (kubectl delete -f). Its
// pods run as its own ServiceAccount, whose rights alone must do the cleanup: on k3s
// and RKE2 flannel's is gone with `helm uninstall`.
func runWeftCleanup(t *testing.T, ctx context.Context, c *kubecluster.Cluster, image string) {
	t.Helper()
	applyManifest(t, ctx, c.Admin, filepath.Join("..", "deploy", "weft-cleanup.yml"), func(o kruntime.Object) bool {
		if ds, ok := o.(*appsv1.DaemonSet); ok && image != "" {
			for i := range ds.Spec.Template.Spec.InitContainers {
				ds.Spec.Template.Spec.InitContainers[i].Image = image
			}
			for i := range ds.Spec.Template.Spec.Containers {
				ds.Spec.Template.Spec.Containers[i].Image = image
			}
		}
		return true
	})
	await(t, ctx, "DaemonSet weft-cleanup ready", func() (bool, string) {
		ds, err := c.Admin.AppsV1().DaemonSets("kube-flannel").Get(ctx, "weft-cleanup", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		n := int32(len(c.Nodes))
		return ds.Status.ObservedGeneration == ds.Generation && ds.Status.DesiredNumberScheduled == n && ds.Status.NumberReady == n,
			fmt.Sprintf("desired %d ready %d", ds.Status.DesiredNumberScheduled, ds.Status.NumberReady)
	})
	pods, err := c.Admin.CoreV1().Pods("kube-flannel").List(ctx, metav1.ListOptions{LabelSelector: "app=weft-cleanup"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.ServiceAccountName != "weft-cleanup" {
			t.Errorf("pod %s ran as ServiceAccount %q, want weft-cleanup's own", p.Name, p.Spec.ServiceAccountName)
		}
	}
	errs := []error{
		c.Admin.AppsV1().DaemonSets("kube-flannel").Delete(ctx, "weft-cleanup", metav1.DeleteOptions{}),
		c.Admin.CoreV1().ServiceAccounts("kube-flannel").Delete(ctx, "weft-cleanup", metav1.DeleteOptions{}),
		c.Admin.RbacV1().ClusterRoleBindings().Delete(ctx, "weft-cleanup", metav1.DeleteOptions{}),
		c.Admin.RbacV1().ClusterRoles().Delete(ctx, "weft-cleanup", metav1.DeleteOptions{}),
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("deleting weft-cleanup.yml's objects: %v", err)
	}
	awaitNoPods(t, ctx, c, "app=weft-cleanup")
}

// checkWeftGone checks that no node keeps weft's marks after weft-cleanup.yml: no weft
// firewall rule, no WeftPeersReachable condition, no weft.weftnet.io/ annotation.
func checkWeftGone(t *testing.T, ctx context.Context, c *kubecluster.Cluster) {
	t.Helper()
	for _, n := range c.Nodes {
		if left := weftFirewall(t, ctx, n); left != "" {
			t.Errorf("node %s after weft-cleanup.yml still has weft's rules:\n%s", n.Name, left)
		}
		node, err := c.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cond := findCondition(node, "WeftPeersReachable"); cond != nil {
			t.Errorf("node %s after weft-cleanup.yml keeps %+v", n.Name, *cond)
		}
		for k := range node.Annotations {
			if strings.HasPrefix(k, "weft.weftnet.io/") {
				t.Errorf("node %s after weft-cleanup.yml keeps the annotation %s", n.Name, k)
			}
		}
	}
}

// helmValuesFile parses a values file's text as helm does.
func helmValuesFile(t *testing.T, s string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

// clusterNetConf is net-conf.json of the kube-flannel-cfg ConfigMap.
func clusterNetConf(t *testing.T, ctx context.Context, c *kubecluster.Cluster) string {
	t.Helper()
	cm, err := c.Admin.CoreV1().ConfigMaps("kube-flannel").Get(ctx, "kube-flannel-cfg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return normalJSON(t, cm.Data["net-conf.json"])
}

// flannelImageRenderer is a helm post-renderer that passes every object on as it is
// but the DaemonSet, which useFlannelImage edits.
type flannelImageRenderer struct{}

func (flannelImageRenderer) Run(in *bytes.Buffer) (*bytes.Buffer, error) {
	out := &bytes.Buffer{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(in))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		var kind struct{ Kind string }
		if err := yaml.Unmarshal(doc, &kind); err != nil {
			return nil, err
		}
		if kind.Kind == "DaemonSet" {
			var ds appsv1.DaemonSet
			if err := yaml.UnmarshalStrict(doc, &ds); err != nil {
				return nil, err
			}
			useFlannelImage(&ds)
			if doc, err = yaml.Marshal(&ds); err != nil {
				return nil, err
			}
		}
		out.WriteString("---\n")
		out.Write(doc)
	}
}

// normalJSON re-encodes a JSON document with sorted keys and no spaces.
func normalJSON(t *testing.T, s string) string {
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
