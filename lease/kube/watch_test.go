package kube

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/weftnet/weft/lease"
)

// storeManager is a Manager whose node cache is filled by hand (the informer never
// runs): for the pure diff logic.
func storeManager(n int) *Manager {
	m := &Manager{opts: Options{NodeName: "node-0"}, log: zap.NewNop(), prefix: DefaultAnnotationPrefix + "/"}
	m.informer = cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Node{}, 0, cache.Indexers{})
	for i := range n {
		_ = m.informer.GetStore().Add(peerNode(i, "192.0.2.10"))
	}
	return m
}

func peerNode(i int, ip string) *corev1.Node {
	cidr := fmt.Sprintf("198.18.%d.%d/29", i/32, i%32*8)
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i), Annotations: map[string]string{
		"flannel.alpha.coreos.com/backend-type": "vxlan",
		"flannel.alpha.coreos.com/backend-data": `{"VNI":1,"VtepMAC":"02:00:00:00:00:01"}`,
		"flannel.alpha.coreos.com/public-ip":    ip,
	}}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}
}

func eventStrings(evs []lease.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%v %v %v", e.Type, e.Lease.Subnet, e.Lease.Attrs.PublicIP))
	}
	slices.Sort(out)
	return out
}

// TestDiffNodes: the events for the named nodes alone are the events a full diff
// finds (a node changed, one gone, one new, one losing its annotations, one moving to
// our subnet), and leave known the same.
func TestDiffNodes(t *testing.T) {
	ownSubnet := netip.MustParsePrefix("198.18.0.0/29") // node-0's, ours
	own := lease.Key{Subnet: ownSubnet}
	full, part := storeManager(20), storeManager(20)
	kFull, kPart := map[string]lease.Lease{}, map[string]lease.Lease{}
	if a, b := eventStrings(full.diff(kFull, own)), eventStrings(part.diff(kPart, own)); len(a) != 19 || !slices.Equal(a, b) {
		t.Fatalf("snapshots differ or are not 19 peers: %v / %v", a, b)
	}
	changes := func(m *Manager) {
		st := m.informer.GetStore()
		_ = st.Update(peerNode(3, "192.0.2.33"))
		_ = st.Delete(peerNode(4, ""))
		_ = st.Add(peerNode(25, "192.0.2.25"))
		bare := peerNode(5, "")
		bare.Annotations = nil
		_ = st.Update(bare)
		moved := peerNode(6, "192.0.2.10")
		moved.Spec.PodCIDR, moved.Spec.PodCIDRs = ownSubnet.String(), []string{ownSubnet.String()}
		_ = st.Update(moved)
		_ = st.Update(peerNode(7, "192.0.2.10")) // unchanged
	}
	changes(full)
	changes(part)
	names := map[string]struct{}{"node-3": {}, "node-4": {}, "node-25": {}, "node-5": {}, "node-6": {}, "node-7": {}}
	a, b := eventStrings(full.diff(kFull, own)), eventStrings(part.diffNodes(kPart, own, names))
	if len(a) != 5 || !slices.Equal(a, b) {
		t.Fatalf("full diff %v\nper-node diff %v", a, b)
	}
	if len(kFull) != len(kPart) {
		t.Fatalf("known: %d vs %d", len(kFull), len(kPart))
	}
	for name, l := range kFull {
		if p, ok := kPart[name]; !ok || p.Subnet != l.Subnet || !p.Attrs.Equal(l.Attrs) {
			t.Fatalf("known[%s] = %v, want %v", name, p, l)
		}
	}
}

// BenchmarkKubeNodeChange: one node's change among n, as Watch handles it now (the
// changed node alone) and as it did (a diff over every node).
func BenchmarkKubeNodeChange(b *testing.B) {
	own := lease.Key{Subnet: netip.MustParsePrefix("198.18.0.0/29")}
	for _, n := range []int{100, 5000} {
		m := storeManager(n)
		known := map[string]lease.Lease{}
		m.diff(known, own)
		i := 0 // across both modes: every visit to a node changes its address
		for _, mode := range []string{"changed", "all"} {
			b.Run(fmt.Sprintf("%s/nodes=%d", mode, n), func(b *testing.B) {
				for b.Loop() {
					node := peerNode(1+i%(n-1), fmt.Sprintf("192.0.2.%d", 100+i%2))
					_ = m.informer.GetStore().Update(node)
					var evs []lease.Event
					if mode == "changed" {
						evs = m.diffNodes(known, own, map[string]struct{}{node.Name: {}})
					} else {
						evs = m.diff(known, own)
					}
					if len(evs) == 0 {
						b.Fatal("no event for a changed node")
					}
					i++
				}
			})
		}
	}
}
