package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftnet/weft/lease"
)

// TestKubeDualStack: weftd --kube-subnet-mgr on a dual-stack network (host-gw), as the
// flannel ServiceAccount, takes both podCIDRs of its node into subnet.env, publishes
// flanneld's IPv6 annotations (public-ipv6 from the interface, or from the node's
// node-public-ipv6), is ready, reports the other node's lease with its IPv6 subnet and
// routes to both of its subnets.
func TestKubeDualStack(t *testing.T) {
	c := newCluster(t, "v3")
	_, cs, id := kubeCluster(t, c)
	conf := filepath.Join(t.TempDir(), "net-conf.json")
	if err := os.WriteFile(conf, []byte(`{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"host-gw"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cidrs := map[string][]string{"a": {"198.18.10.0/24", "fd00:db8:0:10::/64"}, "b": {"198.18.20.0/24", "fd00:db8:0:20::/64"}}
	v6 := map[string]string{"a": "2001:db8:1::11", "b": "2001:db8:1::12"}
	hosts := map[string]*host{}
	for _, name := range []string{"a", "b"} {
		ann := map[string]string{}
		if name == "b" {
			ann["flannel.alpha.coreos.com/node-public-ipv6"] = "2001:db8:1::99"
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + name, Annotations: ann},
			Spec: corev1.NodeSpec{PodCIDR: cidrs[name][0], PodCIDRs: cidrs[name]}}
		if _, err := cs.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		h := c.addHost(name, "lan1")
		c.sh(h.ns, "ip -6 addr add "+v6[name]+"/64 dev eth0 nodad")
		hosts[name] = h
		c.startKube(h, cs, id, conf)
	}
	for name, h := range hosts {
		env := c.waitSubnetEnv(h)
		if env.Subnet.String() != cidrs[name][0] || env.IPv6Subnet.String() != cidrs[name][1] ||
			env.IPv6Network.String() != "fd00:db8::/48" {
			t.Errorf("%s subnet.env %+v, want the podCIDRs %v", name, env, cidrs[name])
		}
		readyz(t, h, http.StatusOK, "ok")
	}
	for name, want := range map[string]string{"a": v6["a"], "b": "2001:db8:1::99"} {
		n := getNode(t, cs, "node-"+name)
		if got := n.Annotations["flannel.alpha.coreos.com/public-ipv6"]; got != want {
			t.Errorf("node-%s public-ipv6 = %q, want %q", name, got, want)
		}
		if got := n.Annotations["flannel.alpha.coreos.com/backend-v6-data"]; got != "null" {
			t.Errorf("node-%s backend-v6-data = %q, want null (host-gw, as flanneld writes it)", name, got)
		}
	}
	peer := lease.Key{Subnet: netip.MustParsePrefix(cidrs["b"][0]), IPv6Subnet: netip.MustParsePrefix(cidrs["b"][1])}
	eventually(t, 30*time.Second, func() error {
		if logs := hosts["a"].logs(); !strings.Contains(logs, `"ipv6-subnet":"`+peer.IPv6Subnet.String()+`","public-ip":"`+hosts["b"].ip+`","public-ipv6":"2001:db8:1::99"`) {
			return fmt.Errorf("weftd on a did not report node-b's lease %v", peer)
		}
		if routes := c.sh(hosts["a"].ns, "ip route show"); !strings.Contains(routes, peer.Subnet.String()+" via "+hosts["b"].ip) {
			return fmt.Errorf("no route to %v on a:\n%s", peer.Subnet, routes)
		}
		// IPv6 host-gw routes from the annotations: via node-b's node-public-ipv6 on a,
		// via a's interface address on b.
		for _, r := range []struct{ on, want string }{
			{"a", cidrs["b"][1] + " via 2001:db8:1::99"},
			{"b", cidrs["a"][1] + " via " + v6["a"]},
		} {
			if routes := c.sh(hosts[r.on].ns, "ip -6 route show"); !strings.Contains(routes, r.want) {
				return fmt.Errorf("no route %q on %s:\n%s", r.want, r.on, routes)
			}
		}
		return nil
	})
}
