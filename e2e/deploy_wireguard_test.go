package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/weftnet/weft/bench/kubecluster"
	"github.com/weftnet/weft/bench/testenv"
)

// helmWireGuardValues installs the chart with the wireguard backend.
// The image by its tag: the archive of make image may hold amd64 alone (weft-image
// -platforms amd64), an index of another digest than the pin (TestPinned's business).
const helmWireGuardValues = `
podCidr: %q
flannel:
  backend: wireguard
  image:
    digest: ""
  args:
  - "--ip-masq"
  - "--kube-subnet-mgr"
`

// TestDeployWireGuard runs the chart (helm install) and then deploy/weft.yml with
// Backend wireguard on one real two-node cluster whose kernel has no WireGuard
// module, so weftd runs the userspace device: for each install path the DaemonSet's
// pods come up Ready, unprivileged (no CAP_SYS_ADMIN in the running weftd), each node
// has flannel-wg as a TUN device with its UAPI socket in the node's own /run/wireguard
// (wg show there lists the other node as a peer), and pods on the two nodes ping both
// ways. helm uninstall in between removes what the chart made; the test pods stay.
func TestDeployWireGuard(t *testing.T) {
	image := daemonSetPrereqs(t)
	testenv.NeedTools(t, "wg", "unshare")
	start := time.Now()
	c := kubecluster.Start(t, kubecluster.Options{RepoRoot: "..", Images: []string{image}})
	t.Logf("cluster up in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	cfg, rel := helmInstall(t, ctx, c, fmt.Sprintf(helmWireGuardValues, kubecluster.ClusterCIDR))
	a := runPod(t, ctx, c, "pod-a", c.Nodes[0])
	b := runPod(t, ctx, c, "pod-b", c.Nodes[1])
	checkWireGuardDeploy(t, ctx, c, a, b)
	t.Logf("helm install, wireguard: pods ping; %v after start", time.Since(start).Round(time.Millisecond))
	uninstall(t, ctx, c, cfg, rel.Name)

	mark := time.Now()
	edit := dsNetConf(t, "wireguard")
	applyManifest(t, ctx, c.Admin, filepath.Join("..", "deploy", "weft.yml"), func(obj kruntime.Object) bool {
		if ds, ok := obj.(*appsv1.DaemonSet); ok {
			spec := &ds.Spec.Template.Spec
			for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
				for i := range cs {
					cs[i].Image, _, _ = strings.Cut(cs[i].Image, "@")
				}
			}
		}
		return edit(obj)
	})
	checkWireGuardDeploy(t, ctx, c, a, b)
	t.Logf("weft.yml, wireguard: pods ping %v after apply; %v after start",
		time.Since(mark).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// checkWireGuardDeploy checks a wireguard install: nodes and DaemonSet ready, the
// backend in the annotations, weftd unprivileged, the userspace device and its UAPI
// socket on each node, and a and b pinging both ways.
func checkWireGuardDeploy(t *testing.T, ctx context.Context, c *kubecluster.Cluster, a, b pod) {
	t.Helper()
	checkNodes(t, ctx, c)
	checkDaemonSet(t, ctx, c.Admin, "weft")
	pods, err := c.Admin.CoreV1().Pods("kube-flannel").List(ctx, metav1.ListOptions{LabelSelector: "app=weft"})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, n := range c.Nodes {
		node, err := c.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := node.Annotations["flannel.alpha.coreos.com/backend-type"]; got != "wireguard" {
			t.Errorf("node %s backend-type %q, want wireguard", n.Name, got)
		}
		keys[n.Name] = node.Annotations["flannel.alpha.coreos.com/backend-data"]
	}
	for _, p := range pods.Items {
		var n *kubecluster.Node
		for _, cn := range c.Nodes {
			if cn.Name == p.Spec.NodeName {
				n = cn
			}
		}
		if n == nil {
			t.Fatalf("pod %s on unknown node %q", p.Name, p.Spec.NodeName)
		}
		checkUnprivileged(t, ctx, n, p)
		checkUserspaceWG(t, ctx, c, n, keys)
	}
	pingPod(t, ctx, c.Admin, a, b)
	pingPod(t, ctx, c.Admin, b, a)
}

// checkUnprivileged: the weft container is not privileged and the running weftd
// has NET_ADMIN but not SYS_ADMIN in its effective capabilities.
func checkUnprivileged(t *testing.T, ctx context.Context, n *kubecluster.Node, p corev1.Pod) {
	t.Helper()
	sc := p.Spec.Containers[0].SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged {
		t.Errorf("pod %s: securityContext %+v, want privileged: false", p.Name, sc)
	}
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	pid, err := n.TaskPid(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var eff uint64
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			if eff, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64); err != nil {
				t.Fatal(err)
			}
		}
	}
	const netAdmin, sysAdmin = 12, 21
	if eff&(1<<netAdmin) == 0 || eff&(1<<sysAdmin) != 0 {
		t.Errorf("weftd in %s: CapEff %#x, want NET_ADMIN without SYS_ADMIN", p.Name, eff)
	}
}

// checkUserspaceWG: flannel-wg on n is a TUN device (wireguard-go's), and wg, run
// with the node's own /run/wireguard (the DaemonSet's hostPath), shows it with the
// other node's key as a peer.
func checkUserspaceWG(t *testing.T, ctx context.Context, c *kubecluster.Cluster, n *kubecluster.Node, keys map[string]string) {
	t.Helper()
	link, err := n.Host.NS.Run(ctx, "ip", "-d", "-o", "link", "show", "dev", "flannel-wg")
	if err != nil || !strings.Contains(link, " tun ") {
		t.Fatalf("flannel-wg on %s: %v %q, want a TUN device (the userspace WireGuard)", n.Name, err, link)
	}
	const script = `mount -t tmpfs weft-wg /run && mkdir /run/wireguard && mount --bind "$0" /run/wireguard && exec wg show flannel-wg`
	var out string
	await(t, ctx, "wg show on "+n.Name+" lists the other node", func() (bool, string) {
		out, err = n.Host.NS.Run(ctx, "unshare", "-m", "sh", "-c", script, filepath.Join(n.Dir, "run", "wireguard"))
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, out)
		}
		for name, data := range keys {
			if name != n.Name && !strings.Contains(data, peerKey(out)) {
				return false, fmt.Sprintf("peer %s (%s) not in:\n%s", name, data, out)
			}
		}
		return true, ""
	})
}

// peerKey is the first peer's public key in wg show's output ("" when none).
func peerKey(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if k, ok := strings.CutPrefix(strings.TrimSpace(l), "peer: "); ok {
			return k
		}
	}
	return "\x00none"
}
