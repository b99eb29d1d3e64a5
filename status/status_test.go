package status

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/paths"
)

const (
	prefix = "flannel.alpha.coreos.com/"
	cond   = "WeftPeersReachable"
)

var now = time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)

// node is a Node as weftd (version set) or flanneld (no version, no condition) leaves it.
func node(name, cidr, version, status, msg string, ann map[string]string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
		prefix + "backend-type": "wireguard", prefix + "public-ip": "192.0.2." + cidr[7:9], prefix + "kube-subnet-manager": "true"}},
		Spec: corev1.NodeSpec{PodCIDR: cidr}}
	if version != "" {
		n.Annotations[annVersion] = version
	}
	for k, v := range ann {
		n.Annotations[k] = v
	}
	if status != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeConditionType(cond), Status: corev1.ConditionStatus(status),
			Message: msg, LastTransitionTime: metav1.NewTime(now.Add(-90 * time.Second))}}
	}
	return n
}

func TestFromNodes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nodes   []corev1.Node
		summary Summary
		healthy bool
		text    []string // lines (or parts) the screen shows
	}{
		{"all reachable, some relayed", []corev1.Node{
			node("node-b", "198.18.20.0/24", "0.2.0", "True", "2 of 2 peers reachable; ways: 0 direct, 1 punched, 1 relayed",
				map[string]string{annSite: "east", annOutside: "203.0.113.7:40001"}),
			node("node-a", "198.18.10.0/24", "0.2.0", "True", "2 of 2 peers reachable", nil),
		}, Summary{Nodes: 2, Reporting: 2, AllReachable: 2, Ways: paths.Ways{Direct: 2, Punched: 1, Relayed: 1}}, true,
			[]string{"kubernetes: 2 nodes, 2 of 2 reporting reach every peer; ways: 2 direct, 1 punched, 1 relayed",
				"node-a  198.18.10.0/24  -     wireguard  192.0.2.10", "node-b  198.18.20.0/24  east  wireguard  203.0.113.7:40001  0.2.0    2 of 2 reachable  0/1/1  1m30s ago"}},
		{"one blocked, one flanneld, one unreadable", []corev1.Node{
			node("node-a", "198.18.10.0/24", "0.2.0", "False", "1 of 2 peers down: 198.18.20.0/24 encap-blocked UDP 51820", nil),
			node("node-b", "198.18.20.0/24", "", "", "", nil),
			node("node-c", "198.18.30.0/24", "0.2.0", "True", "all good", nil),
		}, Summary{Nodes: 3, Reporting: 2, AllReachable: 1, Ways: paths.Ways{Direct: 2}}, false,
			[]string{"kubernetes: 3 nodes, 1 of 2 reporting reach every peer, 1 not reporting",
				"node-a cannot reach 198.18.20.0/24 encap-blocked UDP 51820 (changed 1m30s ago)",
				"node-c: not a peers summary", "node-c  198.18.30.0/24  -     wireguard  192.0.2.30  0.2.0    ?", "node-a  198.18.10.0/24  -     wireguard  192.0.2.10  0.2.0    1 of 2 reachable",
				"node-b  198.18.20.0/24  -     wireguard  192.0.2.20  -        -"}},
		{"no nodes", nil, Summary{}, true, []string{"kubernetes: 0 nodes, 0 of 0 reporting reach every peer; ways: 0 direct"}},
	} {
		c := FromNodes(tc.nodes, prefix, cond)
		if got := c.Summary(); got != tc.summary {
			t.Errorf("%s: summary %+v, want %+v", tc.name, got, tc.summary)
		}
		if c.Healthy() != tc.healthy {
			t.Errorf("%s: healthy %v, want %v", tc.name, c.Healthy(), tc.healthy)
		}
		var b strings.Builder
		if err := c.WriteText(&b, now); err != nil {
			t.Fatal(err)
		}
		for _, want := range tc.text {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s: the screen lacks %q:\n%s", tc.name, want, b.String())
			}
		}
		if _, err := json.Marshal(c); err != nil {
			t.Errorf("%s: JSON: %v", tc.name, err)
		}
	}
}

// TestFromLeases: etcd mode knows who is there from the leases, and each host's
// peers only from its own /peers.
func TestFromLeases(t *testing.T) {
	c := FromLeases([]lease.Lease{
		{Subnet: netip.MustParsePrefix("198.18.2.0/24"), Attrs: lease.Attrs{PublicIP: netip.MustParseAddr("192.0.2.2"), BackendType: "vxlan"}},
		{Subnet: netip.MustParsePrefix("198.18.1.0/24"), Attrs: lease.Attrs{PublicIP: netip.MustParseAddr("192.0.2.1")}}, // flanneld's udp
	})
	if c.Nodes[0].Name != "198.18.1.0/24" || c.Nodes[0].Backend != "udp" || c.Nodes[1].Outside != "192.0.2.2" {
		t.Fatalf("nodes %+v", c.Nodes)
	}
	if s := c.Summary(); s.Reporting != 0 || !c.Healthy() {
		t.Fatalf("leases alone: %+v healthy %v", s, c.Healthy())
	}
	c.SetPeers(0, paths.Report{Peers: []paths.Peer{{Subnet: "198.18.2.0/24", State: paths.StateDown, Reason: paths.ReasonEncap,
		Endpoint: "192.0.2.2:8472", Since: now.Add(-time.Minute)}}}, nil)
	c.SetPeers(1, paths.Report{}, errors.New("GET /peers: connection refused"))
	if s := c.Summary(); s.Reporting != 1 || s.AllReachable != 0 || c.Healthy() {
		t.Fatalf("after /peers: %+v healthy %v", s, c.Healthy())
	}
	var b strings.Builder
	if err := c.WriteText(&b, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"etcd: 2 nodes, 0 of 1 reporting reach every peer, 1 not reporting",
		"198.18.1.0/24 cannot reach 198.18.2.0/24 encap-blocked UDP 8472", "198.18.2.0/24: GET /peers: connection refused"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the screen lacks %q:\n%s", want, b.String())
		}
	}
}
