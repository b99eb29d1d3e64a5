package etcd

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/lease"
)

// TestReservation: a lease key without a TTL is a reservation (flannel's
// Documentation/reservations.md). The host whose PublicIP it names gets its subnet and
// the key keeps no TTL through start, renewals and a restart; a lease of another host
// renewed in the same time shows the renewals were due.
func TestReservation(t *testing.T) {
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		s := newStore(t, srv, api)
		const cfg = `{"Network":"198.18.0.0/16","Backend":{"Type":"udp"}}`
		reserved := netip.MustParsePrefix("198.18.7.0/24")
		key := "/subnets/" + lease.SubnetKey(reserved)
		// As the page says: the value of a lease, put again without a TTL. Written by
		// hand, so no HostID; another backend's lease is still our reservation.
		s.put(t, key, `{"PublicIP":"192.0.2.1","BackendType":"vxlan","BackendData":{"VNI":1}}`)
		if s.hasTTL(t, key) {
			t.Fatal("the reservation has a TTL before weftd started")
		}
		short := ManagerOptions{TTL: 3 * time.Second, RenewMargin: 2 * time.Second, RetryInterval: 100 * time.Millisecond}
		mine := lease.Attrs{PublicIP: ourIP, BackendType: "udp"}

		state := filepath.Join(t.TempDir(), "lease.json")
		start := func() (*Manager, lease.Lease) {
			t.Helper()
			opts := short
			opts.StateFile = state
			m := newManager(t, s, cfg, opts)
			l, err := m.Acquire(testCtx(t, 30*time.Second), mine)
			if err != nil {
				t.Fatalf("acquire: %v", err)
			}
			if l.Subnet != reserved || !l.Reserved || !l.Expiration.IsZero() {
				t.Fatalf("acquired %v (reserved %v, expires %v), want the reservation %v", l.Subnet, l.Reserved, l.Expiration, reserved)
			}
			if s.hasTTL(t, key) {
				t.Fatal("weftd's start gave the reservation a TTL")
			}
			return m, l
		}
		m, own := start()
		if st := m.Stats(); !st.Expiration.IsZero() {
			t.Fatalf("stats expiration %v for a reservation, want none", st.Expiration)
		}
		// Our attributes are published in the reservation.
		if l := leaseMap(t, s.reg)[reserved]; l.Attrs.BackendType != "udp" || l.Attrs.PublicIP != ourIP {
			t.Fatalf("reservation holds %+v, want our attrs", l.Attrs)
		}

		// A lease of another host on the same store, renewed every second meanwhile.
		opts := short
		opts.StateFile = filepath.Join(t.TempDir(), "other.json")
		other := newManager(t, s, "", opts)
		ol, err := other.Acquire(testCtx(t, 30*time.Second), lease.Attrs{PublicIP: addr("192.0.2.2"), BackendType: "udp"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		held := make(chan error, 2)
		go func() { held <- m.Hold(ctx, own, func(lease.Lease) {}) }()
		go func() { held <- other.Hold(ctx, ol, func(lease.Lease) {}) }()
		eventually(t, 20*time.Second, "two renewals of the other host's lease", func() bool { return other.Stats().Renewals >= 2 })
		cancel()
		<-held
		<-held
		if n := m.Stats().Renewals; n != 0 {
			t.Fatalf("the reservation was renewed %d times", n)
		}
		if s.hasTTL(t, key) {
			t.Fatal("holding the reservation gave it a TTL")
		}
		if !s.hasTTL(t, "/subnets/"+lease.SubnetKey(ol.Subnet)) {
			t.Fatal("the other host's lease has no TTL: the check cannot tell")
		}

		// A restart finds it again, still TTL-less.
		start()
	})
}
