package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/weftnet/weft/bench/testenv"
)

// TestCleanupKubeNode: a node leaving weft in Kubernetes mode, both ways, as the
// cleanup DaemonSets run it (kube-flannel's ServiceAccount, never cluster admin).
// weftd on node a (vxlan, probing) sets WeftPeersReachable; a's node also carries
// weft's site annotations. After weftd is killed and path repair's MTU is on a's route
// to b, `weftd cleanup --firewall-only --kube-subnet-mgr` (going back to flanneld)
// removes weft's annotations, the condition, the route MTU and the firewall rules, and
// leaves flanneld's annotations, flannel.1, its routes and subnet.env. Then `weftd
// cleanup --uninstall` leaves the host as it was before weftd started, the node with
// none of flanneld's annotations either, and neither the lease state nor the installed
// files.
func TestCleanupKubeNode(t *testing.T) {
	testenv.NeedTools(t, "nft")
	c := newCluster(t, "v3")
	_, cs, id := kubeCluster(t, c)
	conf := netConf(t, "vxlan")
	createNode(t, cs, "node-a", "198.18.10.0/24")
	createNode(t, cs, "node-b", "198.18.20.0/24")
	// What a weftd with a site (wireguard) left on the node.
	weftAnns := `{"metadata":{"annotations":{"weft.weftnet.io/site":"east","weft.weftnet.io/site-ip":"192.0.2.2"}}}`
	if _, err := cs.CoreV1().Nodes().Patch(context.Background(), "node-a", types.StrategicMergePatchType,
		[]byte(weftAnns), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	b := c.addHost("b", "lan2")
	a := c.addHost("a", "lan1")
	before := snapshot(c, a)
	c.startKubeProbing(b, cs, id, conf)
	c.startKubeProbing(a, cs, id, conf)
	c.waitSubnetEnv(a)
	c.waitSubnetEnv(b)
	eventually(t, 60*time.Second, func() error {
		if findCondition(getNode(t, cs, "node-a"), "WeftPeersReachable") == nil {
			return fmt.Errorf("node-a has no WeftPeersReachable condition yet")
		}
		return nil
	})
	if err := a.daemon.Kill(); err != nil { // SIGKILL, as a crash; waits until it is gone
		t.Fatal(err)
	}
	// Path repair's MTU on the route to b, as weftd leaves it when killed.
	route := strings.TrimSpace(c.sh(a.ns, "ip route show 198.18.20.0/24"))
	if !strings.Contains(route, "dev flannel.1") {
		t.Fatalf("a's route to b: %q, want one via flannel.1", route)
	}
	c.sh(a.ns, "ip route replace "+route+" mtu 1300")

	cleanup := func(extra ...string) string {
		t.Helper()
		args := append([]string{"cleanup", "--subnet-file=" + a.subnetFile(), "--kube-subnet-mgr",
			"--kubeconfig-file=" + id.Kubeconfig, "--node-name=node-a"}, extra...)
		out, err := a.ns.Run(context.Background(), c.bin, args...)
		if err != nil {
			t.Fatalf("weftd %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	t.Logf("weftd cleanup --firewall-only:\n%s", cleanup("--firewall-only"))
	n := getNode(t, cs, "node-a")
	for k := range n.Annotations {
		if strings.HasPrefix(k, "weft.weftnet.io/") {
			t.Errorf("node-a keeps weft's annotation %s after --firewall-only", k)
		}
	}
	if n.Annotations["flannel.alpha.coreos.com/public-ip"] != a.ip {
		t.Errorf("node-a's flannel annotations %v: want flanneld's lease kept (public-ip %s)", n.Annotations, a.ip)
	}
	if cond := findCondition(n, "WeftPeersReachable"); cond != nil {
		t.Errorf("node-a keeps the condition %+v after --firewall-only", *cond)
	}
	if r := strings.TrimSpace(c.sh(a.ns, "ip route show 198.18.20.0/24")); strings.Contains(r, "mtu") || !strings.Contains(r, "dev flannel.1") {
		t.Errorf("a's route to b after --firewall-only: %q, want it without an mtu, via flannel.1", r)
	}
	if _, err := os.Stat(a.subnetFile()); err != nil {
		t.Errorf("subnet.env after --firewall-only: %v, want it kept for flanneld", err)
	}
	if out := c.sh(a.ns, "nft list tables"); strings.Contains(out, "weft") {
		t.Errorf("weft's nftables tables after --firewall-only:\n%s", out)
	}
	if out := c.sh(a.ns, "iptables-save"); strings.Contains(out, "WEFT") {
		t.Errorf("weft's iptables rules after --firewall-only:\n%s", out)
	}

	state := filepath.Join(a.daemon.Dir, "lease-state.json")
	installed := filepath.Join(t.TempDir(), "10-flannel.conflist")
	if err := os.WriteFile(installed, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("weftd cleanup --uninstall:\n%s", cleanup("--uninstall", "--lease-state-file="+state, "--remove-files="+installed))
	if d := before.diff(snapshot(c, a)); d != "" {
		t.Errorf("after --uninstall, a differs from before weftd started:\n%s", d)
	}
	for k := range getNode(t, cs, "node-a").Annotations {
		if strings.HasPrefix(k, "weft.weftnet.io/") || strings.HasPrefix(k, "flannel.alpha.coreos.com/") {
			t.Errorf("node-a keeps %s after --uninstall", k)
		}
	}
	for _, f := range []string{a.subnetFile(), state, installed} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s after --uninstall: %v, want it gone", f, err)
		}
	}
	// node-b was not touched.
	if nb := getNode(t, cs, "node-b"); nb.Annotations["flannel.alpha.coreos.com/public-ip"] != b.ip {
		t.Errorf("node-b's annotations changed: %v", nb.Annotations)
	}
}
