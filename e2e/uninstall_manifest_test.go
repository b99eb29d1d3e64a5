package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/weftnet/weft/bench/kubecluster"
)

// uninstallFiles are what weft's DaemonSet leaves on a node that weft-uninstall.yml
// removes: the CNI config and plugin its init containers installed, and weftd's
// subnet.env.
var uninstallFiles = []string{"/etc/cni/net.d/10-flannel.conflist", "/opt/cni/bin/flannel", "/run/flannel/subnet.env"}

// TestUninstallManifest runs deploy/README.md's "Removing weft for good" on the real
// two-node cluster: weft from weft.yml (vxlan), pods on the two nodes pinging each
// other; then `kubectl delete -f weft.yml`, weft-uninstall.yml applied until its
// DaemonSet is ready on both nodes (rollout status), and `kubectl delete -f
// weft-uninstall.yml`. No node then keeps weft's device, routes, firewall rules,
// subnet.env, CNI config or plugin, and no Node flannel's or weft's annotations or
// weft's condition; weft-uninstall.yml's objects are gone.
func TestUninstallManifest(t *testing.T) {
	image := daemonSetPrereqs(t)
	c := kubecluster.Start(t, kubecluster.Options{RepoRoot: "..", Images: []string{image}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	weftYML := filepath.Join("..", "deploy", "weft.yml")
	applyManifest(t, ctx, c.Admin, weftYML, dsNetConf(t, "vxlan"))
	checkNodes(t, ctx, c)
	checkDaemonSet(t, ctx, c.Admin, "weft")
	a := runPod(t, ctx, c, "pod-a", c.Nodes[0])
	b := runPod(t, ctx, c, "pod-b", c.Nodes[1])
	pingPod(t, ctx, c.Admin, a, b)
	// What must go is there before, or the checks after would prove nothing.
	await(t, ctx, "weft's marks on every node", func() (bool, string) {
		for _, n := range c.Nodes {
			if left := weftLeft(t, ctx, c, n); len(left) < 5 {
				return false, fmt.Sprintf("%s has only %q", n.Name, left)
			}
		}
		return true, ""
	})

	deleteManifest(t, ctx, c.Admin, weftYML)
	awaitNoPods(t, ctx, c, "app=weft")
	uninstallYML := filepath.Join("..", "deploy", "weft-uninstall.yml")
	start := time.Now()
	applyManifest(t, ctx, c.Admin, uninstallYML, func(kruntime.Object) bool { return true })
	await(t, ctx, "DaemonSet weft-uninstall ready", func() (bool, string) {
		ds, err := c.Admin.AppsV1().DaemonSets("weft-uninstall").Get(ctx, "weft-uninstall", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		n := int32(len(c.Nodes))
		return ds.Status.ObservedGeneration == ds.Generation && ds.Status.DesiredNumberScheduled == n && ds.Status.NumberReady == n,
			fmt.Sprintf("desired %d ready %d", ds.Status.DesiredNumberScheduled, ds.Status.NumberReady)
	})
	deleteManifest(t, ctx, c.Admin, uninstallYML)
	await(t, ctx, "namespace weft-uninstall gone", func() (bool, string) {
		_, err := c.Admin.CoreV1().Namespaces().Get(ctx, "weft-uninstall", metav1.GetOptions{})
		return err != nil && strings.Contains(err.Error(), "not found"), fmt.Sprint(err)
	})
	t.Logf("weft-uninstall.yml applied, ready on both nodes and deleted in %v", time.Since(start).Round(time.Millisecond))
	for _, n := range c.Nodes {
		if left := weftLeft(t, ctx, c, n); len(left) > 0 {
			t.Errorf("node %s after weft-uninstall.yml keeps:\n%s", n.Name, strings.Join(left, "\n"))
		}
	}
	for _, name := range []string{"weft-uninstall"} {
		if _, err := c.Admin.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{}); err == nil {
			t.Errorf("ClusterRole %s left after kubectl delete -f", name)
		}
		if _, err := c.Admin.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{}); err == nil {
			t.Errorf("ClusterRoleBinding %s left after kubectl delete -f", name)
		}
	}
}

// weftLeft lists what of weft node n has: its links and routes, firewall rules, files,
// and the Node's flannel and weft annotations and weft's condition.
func weftLeft(t *testing.T, ctx context.Context, c *kubecluster.Cluster, n *kubecluster.Node) []string {
	t.Helper()
	var left []string
	links, err := n.Host.NS.Run(ctx, "ip", "-o", "link", "show")
	if err != nil {
		t.Fatalf("ip link on %s: %v", n.Name, err)
	}
	for _, l := range strings.Split(links, "\n") {
		if strings.Contains(l, "flannel") {
			left = append(left, "link: "+strings.TrimSpace(l))
		}
	}
	routes, err := n.Host.NS.Run(ctx, "ip", "route", "show")
	if err != nil {
		t.Fatalf("ip route on %s: %v", n.Name, err)
	}
	for _, l := range strings.Split(routes, "\n") {
		if strings.Contains(l, "flannel") {
			left = append(left, "route: "+l)
		}
	}
	if fw := weftFirewall(t, ctx, n); fw != "" {
		left = append(left, fw)
	}
	for _, f := range uninstallFiles {
		if _, err := os.Lstat(nodePath(t, n, f)); !errors.Is(err, fs.ErrNotExist) {
			left = append(left, "file: "+f)
		}
	}
	node, err := c.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k := range node.Annotations {
		if strings.HasPrefix(k, "flannel.alpha.coreos.com/") || strings.HasPrefix(k, "weft.weftnet.io/") {
			left = append(left, "annotation: "+k)
		}
	}
	if cond := findCondition(node, "WeftPeersReachable"); cond != nil {
		left = append(left, "condition: WeftPeersReachable")
	}
	return left
}
