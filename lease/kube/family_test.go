package kube

import (
	"net/netip"
	"testing"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLeaseOfBackendData: a peer's lease needs a good public-ip; its backend-data,
// when missing or not JSON, is passed on as none (as flanneld passes it on: host-gw
// routes such a peer, vxlan skips it for want of a VtepMAC), never a reason to skip
// the node.
func TestLeaseOfBackendData(t *testing.T) {
	const p = DefaultAnnotationPrefix + "/"
	for _, tt := range []struct {
		name     string
		ann      map[string]string // besides backend-type host-gw
		ok       bool
		publicIP string
		data     string
	}{
		{"null", map[string]string{p + "public-ip": "192.0.2.20", p + "backend-data": "null"}, true, "192.0.2.20", ""},
		{"json", map[string]string{p + "public-ip": "192.0.2.20", p + "backend-data": `{"VNI":1}`}, true, "192.0.2.20", `{"VNI":1}`},
		{"missing data", map[string]string{p + "public-ip": "192.0.2.20"}, true, "192.0.2.20", ""},
		{"data not JSON", map[string]string{p + "public-ip": "192.0.2.20", p + "backend-data": `{"VNI":1,"VtepMAC":`}, true, "192.0.2.20", ""},
		{"bad public-ip", map[string]string{p + "public-ip": "192.0.2.x", p + "backend-data": "null"}, false, "", ""},
		{"missing public-ip", map[string]string{p + "backend-data": "null"}, false, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := &Manager{log: zap.NewNop(), prefix: p}
			ann := map[string]string{p + "backend-type": "host-gw"}
			for k, v := range tt.ann {
				ann[k] = v
			}
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "peer", Annotations: ann},
				Spec: corev1.NodeSpec{PodCIDR: "198.18.7.0/24", PodCIDRs: []string{"198.18.7.0/24"}}}
			l, ok := m.leaseOf(n)
			if ok != tt.ok {
				t.Fatalf("leaseOf: ok %v, want %v (%+v)", ok, tt.ok, l)
			}
			if !ok {
				return
			}
			if l.Subnet != netip.MustParsePrefix("198.18.7.0/24") || l.Attrs.PublicIP.String() != tt.publicIP ||
				string(l.Attrs.BackendData) != tt.data || l.Attrs.BackendType != "host-gw" {
				t.Errorf("leaseOf = %v %+v, want 198.18.7.0/24 public-ip %s data %q", l.Subnet, l.Attrs, tt.publicIP, tt.data)
			}
		})
	}
}
