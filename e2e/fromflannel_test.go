package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/weftnet/weft/bench/kubecluster"
	"github.com/weftnet/weft/bench/testenv"
)

// flannelImage is the upstream flanneld v0.28.10 (test/flannel) in an image made as
// weft's is: weft's image (iptables, weft-install, the flannel CNI plugin) with
// /opt/bin/flanneld added.
const flannelImage = "registry.weft.test/flannel:v0.28.10"

// checkBackOnFlannel checks a cluster gone back to flanneld after weft-cleanup.yml ran:
// on every node no weft rule and flanneld's FLANNEL-FWD chain, no WeftPeersReachable
// condition and no weft.weftnet.io/ annotation; the pods keep their addresses and
// were never restarted.
func checkBackOnFlannel(t *testing.T, ctx context.Context, c *kubecluster.Cluster, pods ...pod) {
	t.Helper()
	checkWeftGone(t, ctx, c)
	for _, n := range c.Nodes {
		if rules := iptablesSave(t, ctx, n); !strings.Contains(rules, "-j FLANNEL-FWD") {
			t.Errorf("node %s back on flanneld without its FLANNEL-FWD chain:\n%s", n.Name, rules)
		}
	}
	for _, want := range pods {
		got, err := c.Admin.CoreV1().Pods("default").Get(ctx, want.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.PodIP != want.ip.String() || got.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s back on flannel: address %s (was %s), restarts %d", want.name, got.Status.PodIP, want.ip, got.Status.ContainerStatuses[0].RestartCount)
		}
	}
}

// checkConfigAccepts runs `weftd check-config --kube-subnet-mgr --file -` on netConf, as
// the switch steps do first, and fails t unless weftd takes it (exit 0, "accepted").
func checkConfigAccepts(t *testing.T, ctx context.Context, netConf string) {
	t.Helper()
	check := exec.CommandContext(ctx, weftd(t), "check-config", "--kube-subnet-mgr", "--file", "-")
	check.Stdin = strings.NewReader(netConf)
	if out, err := check.CombinedOutput(); err != nil || !strings.Contains(string(out), "accepted") {
		t.Fatalf("weftd check-config on the running flannel's net-conf.json: %v\n%s", err, out)
	}
}

// TestDaemonSetFromFlannel runs a cluster on the upstream kube-flannel.yml (v0.28.10,
// vxlan) and switches it to weft as deploy/README.md says: delete flannel's DaemonSet,
// create weft.yml's objects but its ConfigMap. The running pods keep their addresses
// and keep talking (ping every 10 ms throughout: the loss is reported) and the
// ConfigMap is flannel's, unchanged.
func TestDaemonSetFromFlannel(t *testing.T) {
	image := daemonSetPrereqs(t)
	flannelTar, modDir := flannelTestImage(t, image)

	start := time.Now()
	c := kubecluster.Start(t, kubecluster.Options{RepoRoot: "..", Images: []string{image, flannelTar}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// flannel, as kube-flannel.yml has it but for the image.
	conf := dsNetConf(t, "vxlan")
	kubeFlannel := filepath.Join(modDir, "Documentation", "kube-flannel.yml")
	flannelObjs := func(obj kruntime.Object) bool {
		conf(obj)
		if ds, ok := obj.(*appsv1.DaemonSet); ok {
			useFlannelImage(ds)
		}
		return true
	}
	applyManifest(t, ctx, c.Admin, kubeFlannel, flannelObjs)
	checkNodes(t, ctx, c)
	checkDaemonSet(t, ctx, c.Admin, "kube-flannel-ds")
	cm, err := c.Admin.CoreV1().ConfigMaps("kube-flannel").Get(ctx, "kube-flannel-cfg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Step 1 of deploy/README.md: weftd takes the ConfigMap's net-conf.json.
	checkConfigAccepts(t, ctx, cm.Data["net-conf.json"])
	a := runPod(t, ctx, c, "pod-a", c.Nodes[0])
	b := runPod(t, ctx, c, "pod-b", c.Nodes[1])
	pingPod(t, ctx, c.Admin, a, b)
	tcpPods(t, a, b, 1<<20)
	t.Logf("flannel: nodes, DaemonSet and pods ready %v after start", time.Since(start).Round(time.Millisecond))
	for _, n := range c.Nodes {
		if rules := iptablesSave(t, ctx, n); !strings.Contains(rules, "-j FLANNEL-FWD") {
			t.Fatalf("node %s runs flanneld without its FLANNEL-FWD chain:\n%s", n.Name, rules)
		}
	}

	// The switch, as deploy/README.md says.
	p := startPing(t, ctx, a, b)
	defer p.kill()
	if err := c.Admin.AppsV1().DaemonSets("kube-flannel").Delete(ctx, "kube-flannel-ds", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	await(t, ctx, "flannel's pods gone", func() (bool, string) {
		pods, err := c.Admin.CoreV1().Pods("kube-flannel").List(ctx, metav1.ListOptions{LabelSelector: "app=flannel"})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, ""
	})
	applyManifest(t, ctx, c.Admin, filepath.Join("..", "deploy", "weft.yml"), func(obj kruntime.Object) bool {
		m, err := meta.Accessor(obj)
		return err == nil && m.GetLabels()["app.kubernetes.io/component"] != "net-config"
	})
	checkDaemonSet(t, ctx, c.Admin, "weft")
	sent, received, gap := p.stop(t, ctx)
	t.Logf("flannel -> weft: %d pings every 10 ms, %d answered, longest gap %v; %v after start",
		sent, received, gap, time.Since(start).Round(time.Millisecond))
	if received == 0 {
		t.Errorf("no ping answered during the switch")
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
	pingPod(t, ctx, c.Admin, a, b)
	pingPod(t, ctx, c.Admin, b, a)
	tcpPods(t, a, b, 8<<20)
	tcpPods(t, b, a, 8<<20)
	after, err := c.Admin.CoreV1().ConfigMaps("kube-flannel").Get(ctx, "kube-flannel-cfg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != cm.ResourceVersion || after.Data["net-conf.json"] != cm.Data["net-conf.json"] {
		t.Errorf("the ConfigMap changed in the switch: %v -> %v", cm.Data, after.Data)
	}
	// weftd took over the rules: flanneld's chains are gone, weft's are there.
	for _, n := range c.Nodes {
		rules := iptablesSave(t, ctx, n)
		if strings.Contains(rules, "FLANNEL-") || !strings.Contains(rules, "-j WEFT-FWD") {
			t.Errorf("node %s after the switch: want weft's forward chain and none of flanneld's:\n%s", n.Name, rules)
		}
	}
	logMemory(t, c)
	// A pod started after the switch gets its address from weftd's subnet.env.
	d := runPod(t, ctx, c, "pod-c", c.Nodes[0])
	pingPod(t, ctx, c.Admin, d, b)
	if d.ip == a.ip {
		t.Errorf("pod-c got pod-a's address %s", d.ip)
	}

	// And back, as deploy/README.md says: delete weft's DaemonSet, create flannel's
	// (kubectl create: only what is missing), then run weft-cleanup.yml once. A table
	// ip weft and ip6 weft, as a weftd with EnableNFTables leaves them, stand on the
	// first node, for the cleanup to remove too.
	for _, fam := range []string{"ip", "ip6"} {
		if out, err := c.Nodes[0].Host.NS.Run(ctx, "nft", "add", "table", fam, "weft"); err != nil {
			t.Fatalf("nft add table %s weft: %v\n%s", fam, err, out)
		}
	}
	back := time.Now()
	p = startPing(t, ctx, a, b)
	defer p.kill()
	if err := c.Admin.AppsV1().DaemonSets("kube-flannel").Delete(ctx, "weft", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitNoPods(t, ctx, c, "app=weft")
	applyManifest(t, ctx, c.Admin, kubeFlannel, flannelObjs)
	checkDaemonSet(t, ctx, c.Admin, "kube-flannel-ds")
	for _, n := range c.Nodes {
		if weftFirewall(t, ctx, n) == "" {
			t.Fatalf("node %s: weft's rules gone before weft-cleanup.yml ran: the check below would prove nothing", n.Name)
		}
	}
	// weftd set its WeftPeersReachable condition on the nodes; the cleanup removes it.
	for _, n := range c.Nodes {
		if node, err := c.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		} else if findCondition(node, "WeftPeersReachable") == nil {
			t.Fatalf("node %s has no WeftPeersReachable before weft-cleanup.yml: the check below would prove nothing", n.Name)
		}
	}
	runWeftCleanup(t, ctx, c, "")
	sent, received, gap = p.stop(t, ctx)
	t.Logf("weft -> flannel and weft-cleanup.yml: %d pings every 10 ms, %d answered, longest gap %v; took %v",
		sent, received, gap, time.Since(back).Round(time.Millisecond))
	if received == 0 {
		t.Errorf("no ping answered during the switch back")
	}
	checkBackOnFlannel(t, ctx, c, a, b, d)
	pingPod(t, ctx, c.Admin, a, b)
	pingPod(t, ctx, c.Admin, b, d)
	tcpPods(t, b, a, 1<<20)
}

// flannelTestImage builds the upstream flanneld (test/flannel) into flannelImage's
// archive and returns it with the directory of flannel's Go module (its manifests and
// chart).
func flannelTestImage(t *testing.T, image string) (tar, modDir string) {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/flannel-io/flannel")
	cmd.Dir = filepath.Join("..", "test", "flannel")
	out, err := cmd.Output()
	var mod struct{ Dir string }
	if err == nil {
		err = json.Unmarshal(out, &mod)
	}
	testenv.Need(t, err == nil && mod.Dir != "", "the flannel module (cd test/flannel && go mod download)")
	tmp := t.TempDir()
	buildStart := time.Now()
	flanneld := filepath.Join(tmp, "flanneld")
	if err := kubecluster.BuildFlanneld(context.Background(), "..", flanneld); err != nil {
		t.Fatal(err)
	}
	tar = filepath.Join(tmp, "flannel.tar")
	if err := kubecluster.WriteImageOver(tar, image, flannelImage, map[string]string{"/opt/bin/flanneld": flanneld}); err != nil {
		t.Fatal(err)
	}
	t.Logf("static flanneld and its image built in %v", time.Since(buildStart).Round(time.Millisecond))
	return tar, mod.Dir
}

// useFlannelImage makes flannel's DaemonSet run flannelImage: its init steps copy
// with weft-install, as the image has no cp or install-conf.
func useFlannelImage(ds *appsv1.DaemonSet) {
	spec := &ds.Spec.Template.Spec
	for i := range spec.InitContainers {
		ic := &spec.InitContainers[i]
		ic.Image = flannelImage
		ic.Command = []string{"/opt/bin/weft-install"}
		if ic.Name == "install-cni" {
			ic.Args = append([]string{"-mode", "0644"}, ic.Args...)
		} else {
			ic.Args = []string{"/flannel", "/opt/cni/bin/flannel"}
		}
	}
	spec.Containers[0].Image = flannelImage
}

// awaitNoPods waits until no pod in kube-flannel matches selector.
func awaitNoPods(t *testing.T, ctx context.Context, c *kubecluster.Cluster, selector string) {
	t.Helper()
	await(t, ctx, "pods "+selector+" gone", func() (bool, string) {
		pods, err := c.Admin.CoreV1().Pods("kube-flannel").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods", len(pods.Items))
	})
}

// weftFirewall returns what of weft's firewall node n has: lines naming a WEFT- chain
// in either iptables backend (IPv4 and IPv6) and nftables tables called weft.
func weftFirewall(t *testing.T, ctx context.Context, n *kubecluster.Node) string {
	t.Helper()
	var left []string
	for _, save := range []string{"iptables-legacy-save", "iptables-nft-save", "ip6tables-legacy-save", "ip6tables-nft-save"} {
		out, err := n.Host.NS.Run(ctx, save)
		if err != nil {
			t.Fatalf("%s on %s: %v\n%s", save, n.Name, err, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "WEFT-") {
				left = append(left, save+": "+l)
			}
		}
	}
	out, err := n.Host.NS.Run(ctx, "nft", "list", "tables")
	if err != nil {
		t.Fatalf("nft list tables on %s: %v\n%s", n.Name, err, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "table" && f[2] == "weft" {
			left = append(left, "nft: "+l)
		}
	}
	return strings.Join(left, "\n")
}

// iptablesSave lists the rules of node n's network namespace.
func iptablesSave(t *testing.T, ctx context.Context, n *kubecluster.Node) string {
	t.Helper()
	out, err := n.Host.NS.Run(ctx, "iptables-save")
	if err != nil {
		t.Fatalf("iptables-save on %s: %v", n.Name, err)
	}
	return out
}
