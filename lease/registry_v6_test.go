package lease

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/internal/etcdproc"
)

// A peer's dual-stack vxlan lease as flanneld writes it (key and value).
const (
	dualKey     = "/subnets/198.18.207.0-24&fd00:db8:0:207::-64"
	v6OnlyKey   = "/subnets/0.0.0.0-0&fd00:db8:0:208::-64"
	peerDualIP  = "192.0.2.21"
	peerV6Value = `{"PublicIP":"0.0.0.0","PublicIPv6":"2001:db8::22","BackendType":"vxlan","BackendV6Data":{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:fd"}}`
)

func peerDualValue() string {
	return strings.Replace(flanneldDualStackVXLAN, "192.0.2.1", peerDualIP, 1)
}

func peerDualAttrs(t *testing.T) Attrs {
	t.Helper()
	a, err := DecodeAttrs([]byte(peerDualValue()))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestRegistryDualStackLease: a v4-only registry lists and watches a flanneld
// dual-stack lease as the IPv4 lease it holds (with its IPv6 half kept), and passes
// over an IPv6-only lease, on both APIs.
func TestRegistryDualStackLease(t *testing.T) {
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		ctx := testCtx(t, 60*time.Second)
		s := newStore(t, srv, api)
		want := Lease{Subnet: pfx("198.18.207.0/24"), IPv6Subnet: pfx("fd00:db8:0:207::/64"), Attrs: peerDualAttrs(t)}
		l, err := s.reg.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w := startWatch(t, s.reg, l.Rev)
		s.put(t, v6OnlyKey, peerV6Value)
		s.put(t, dualKey, peerDualValue())
		create(t, s, pfx("198.18.5.0/24"), attrsA)

		c := w.next(t)
		if c.Type != Added || c.Bad != nil || c.Lease.Subnet != want.Subnet || c.Lease.IPv6Subnet != want.IPv6Subnet ||
			!c.Lease.Attrs.Equal(want.Attrs) {
			t.Fatalf("first change %+v, want the dual-stack lease %+v (the IPv6-only one is skipped)", c, want)
		}
		if c = w.next(t); c.Type != Added || c.Lease.Subnet != pfx("198.18.5.0/24") || c.Lease.IPv6Subnet.IsValid() {
			t.Fatalf("second change %+v, want the v4 lease 198.18.5.0/24", c)
		}
		l, err = s.reg.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Leases) != 2 || len(l.Unreadable) != 0 {
			t.Fatalf("List = %+v, want the dual-stack and the v4 lease", l)
		}
		got := leaseMap(t, s.reg)[want.Subnet]
		if got.IPv6Subnet != want.IPv6Subnet || !got.Attrs.Equal(want.Attrs) {
			t.Errorf("listed %+v, want %+v", got, want)
		}
		s.del(t, dualKey)
		if c = w.next(t); c.Type != Removed || c.Lease.Subnet != want.Subnet || c.Lease.IPv6Subnet != want.IPv6Subnet {
			t.Fatalf("after delete: %+v, want Removed %v", c, want.Subnet)
		}
		s.del(t, v6OnlyKey)
		create(t, s, pfx("198.18.6.0/24"), attrsB)
		if c = w.next(t); c.Type != Added || c.Lease.Subnet != pfx("198.18.6.0/24") {
			t.Fatalf("after deleting the IPv6-only lease: %+v, want Added 198.18.6.0/24 only", c)
		}
	})
}

// TestManagerDualStackLease: the manager sends a peer's dual-stack lease to the
// backend as a v4 lease, never leases its subnet again, and leaves a dual-stack lease
// holding our own PublicIP alone (its key is not the one a v4 lease would have).
func TestManagerDualStackLease(t *testing.T) {
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		ctx := testCtx(t, 2*time.Minute)
		s := newStore(t, srv, api)
		s.put(t, dualKey, peerDualValue())
		m := newManager(t, s, `{"Network":"198.18.0.0/16","SubnetMin":"198.18.207.0","SubnetMax":"198.18.208.0","Backend":{"Type":"vxlan"}}`, ManagerOptions{})
		own, err := m.Acquire(ctx, Attrs{PublicIP: ourIP, BackendType: "vxlan"})
		if err != nil {
			t.Fatal(err)
		}
		if own.Subnet != pfx("198.18.208.0/24") {
			t.Fatalf("leased %v, want 198.18.208.0/24 (198.18.207.0/24 is the peer's)", own.Subnet)
		}
		ch := watchEvents(t, m, own.Subnet)
		expectBatch(t, ch, ev(Added, "198.18.207.0/24", peerDualAttrs(t)))

		// Our PublicIP in a dual-stack lease on the only free subnet: not reused,
		// not deleted, so no subnet is left.
		s2 := newStore(t, srv, api)
		s2.put(t, "/subnets/198.18.9.0-24&fd00:db8:0:9::-64", flanneldDualStackVXLAN)
		m2 := newManager(t, s2, `{"Network":"198.18.0.0/16","SubnetMin":"198.18.9.0","SubnetMax":"198.18.9.0","Backend":{"Type":"vxlan"}}`, ManagerOptions{})
		if l, err := m2.Acquire(ctx, Attrs{PublicIP: ourIP, BackendType: "vxlan"}); !errors.Is(err, ErrNoFreeSubnet) {
			t.Fatalf("Acquire = %+v, %v; want ErrNoFreeSubnet", l, err)
		}
		got := leaseMap(t, s2.reg)[pfx("198.18.9.0/24")]
		if got.IPv6Subnet != pfx("fd00:db8:0:9::/64") || got.Attrs.PublicIPv6 != addr("2001:db8::1") {
			t.Errorf("the dual-stack lease became %+v", got)
		}
	})
}
