package kube

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftnet/weft/lease"
)

// TestKubeDualStack: on a real kube-apiserver, with kube-flannel's rights only, a
// dual-stack network leases both of a node's podCIDRs, publishes the IPv6
// annotations flanneld writes (backend-v6-data, public-ipv6), and reads a peer
// annotated as flanneld annotates it as a dual-stack lease; an IPv6-only network
// leases the IPv6 podCIDR alone and publishes no IPv4 address for vxlan.
func TestKubeDualStack(t *testing.T) {
	srv, cs := apiServer(t)
	id := flannel(t, srv, cs)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const dual = `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"vxlan"}}`
	createDualNode(t, cs, "d1", nil, "198.18.1.0/24", "fd00:db8:0:1::/64")
	// d2 as flanneld v0.28.10 leaves a dual-stack vxlan node.
	createDualNode(t, cs, "d2", map[string]string{
		"flannel.alpha.coreos.com/backend-type":        "vxlan",
		"flannel.alpha.coreos.com/backend-data":        `{"VNI":1,"VtepMAC":"02:00:00:00:00:02"}`,
		"flannel.alpha.coreos.com/public-ip":           "192.0.2.12",
		"flannel.alpha.coreos.com/backend-v6-data":     `{"VNI":1,"VtepMAC":"02:00:00:00:06:02"}`,
		"flannel.alpha.coreos.com/public-ipv6":         "2001:db8::12",
		"flannel.alpha.coreos.com/kube-subnet-manager": "true",
	}, "198.18.2.0/24", "fd00:db8:0:2::/64")

	m1 := newManagerConf(t, id, Options{NodeName: "d1"}, dual)
	if _, err := m1.Config(ctx); err != nil {
		t.Fatal(err)
	}
	a := attrs("192.0.2.11")
	a.PublicIPv6 = netip.MustParseAddr("2001:db8::11")
	a.BackendV6Data = []byte(`{"VNI":1,"VtepMAC":"02:00:00:00:06:01"}`)
	l1, err := m1.Acquire(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if want := (lease.Key{Subnet: pfx("198.18.1.0/24"), IPv6Subnet: pfx("fd00:db8:0:1::/64")}); l1.Key() != want {
		t.Fatalf("acquired %v, want %v", l1.Key(), want)
	}
	wantAnn(t, cs, "d1", map[string]string{
		"flannel.alpha.coreos.com/backend-data":    `{"VtepMAC":"02:00:00:00:00:01"}`,
		"flannel.alpha.coreos.com/public-ip":       "192.0.2.11",
		"flannel.alpha.coreos.com/backend-v6-data": `{"VNI":1,"VtepMAC":"02:00:00:00:06:01"}`,
		"flannel.alpha.coreos.com/public-ipv6":     "2001:db8::11",
	})
	events := make(chan []lease.Event, 16)
	go m1.Watch(ctx, l1.Key(), events)
	select {
	case evs := <-events:
		if len(evs) != 1 || evs[0].Type != lease.Added {
			t.Fatalf("snapshot %+v, want d2's lease", evs)
		}
		l := evs[0].Lease
		if l.Key() != (lease.Key{Subnet: pfx("198.18.2.0/24"), IPv6Subnet: pfx("fd00:db8:0:2::/64")}) ||
			l.Attrs.PublicIP.String() != "192.0.2.12" || l.Attrs.PublicIPv6.String() != "2001:db8::12" ||
			string(l.Attrs.BackendV6Data) != `{"VNI":1,"VtepMAC":"02:00:00:00:06:02"}` {
			t.Fatalf("d2's lease read as %+v", l)
		}
	case <-ctx.Done():
		t.Fatal("no snapshot")
	}

	// IPv6-only.
	createDualNode(t, cs, "s1", nil, "fd00:db8:0:3::/64")
	m3 := newManagerConf(t, id, Options{NodeName: "s1"}, `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"vxlan"}}`)
	if _, err := m3.Config(ctx); err != nil {
		t.Fatal(err)
	}
	l3, err := m3.Acquire(ctx, lease.Attrs{PublicIP: netip.IPv4Unspecified(), PublicIPv6: netip.MustParseAddr("2001:db8::13"),
		BackendType: "vxlan", BackendV6Data: []byte(`{"VNI":1,"VtepMAC":"02:00:00:00:06:03"}`)})
	if err != nil || l3.Key() != (lease.Key{IPv6Subnet: pfx("fd00:db8:0:3::/64")}) {
		t.Fatalf("IPv6-only acquire = %v, %v", l3.Key(), err)
	}
	n := wantAnn(t, cs, "s1", map[string]string{
		"flannel.alpha.coreos.com/backend-v6-data": `{"VNI":1,"VtepMAC":"02:00:00:00:06:03"}`,
		"flannel.alpha.coreos.com/public-ipv6":     "2001:db8::13",
	})
	for _, k := range []string{"flannel.alpha.coreos.com/public-ip", "flannel.alpha.coreos.com/backend-data"} {
		if v, ok := n.Annotations[k]; ok {
			t.Errorf("IPv6-only vxlan node has %s=%q; flanneld writes none", k, v)
		}
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func createDualNode(t *testing.T, cs kubernetes.Interface, name string, annotations map[string]string, cidrs ...string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: corev1.NodeSpec{PodCIDR: cidrs[0], PodCIDRs: cidrs}}
	if _, err := cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// wantAnn checks node name's annotations hold want and returns the node.
func wantAnn(t *testing.T, cs kubernetes.Interface, name string, want map[string]string) *corev1.Node {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		if n.Annotations[k] != v {
			t.Errorf("node %s: annotation %s = %q, want %q", name, k, n.Annotations[k], v)
		}
	}
	return n
}
