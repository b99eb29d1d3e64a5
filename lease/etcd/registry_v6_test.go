package etcd

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/lease"
)

// A peer's dual-stack vxlan lease and an IPv6-only one, as flanneld writes them.
const (
	dualKey     = "/subnets/198.18.207.0-24&fd00:db8:0:207::-64"
	v6OnlyKey   = "/subnets/0.0.0.0-0&fd00:db8:0:208::-64"
	peerDualIP  = "192.0.2.21"
	peerV6Value = `{"PublicIP":"0.0.0.0","PublicIPv6":"2001:db8::22","BackendType":"vxlan","BackendV6Data":{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:fd"}}`
)

const (
	dualCfg   = `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"vxlan"}}`
	v6OnlyCfg = `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"vxlan"}}`
)

var (
	dualKeyParsed   = lease.Key{Subnet: pfx("198.18.207.0/24"), IPv6Subnet: pfx("fd00:db8:0:207::/64")}
	v6OnlyKeyParsed = lease.Key{IPv6Subnet: pfx("fd00:db8:0:208::/64")}
	ourIPv6         = addr("2001:db8::1")
)

// flanneld's lease value on a dual-stack vxlan network (the MACs made up), as in the
// lease package's codec tests.
const flanneldDualStackVXLAN = `{"PublicIP":"192.0.2.1","PublicIPv6":"2001:db8::1","BackendType":"vxlan",` +
	`"BackendData":{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:ff"},"BackendV6Data":{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:fe"}}`

func peerDualValue() string {
	return strings.Replace(flanneldDualStackVXLAN, "192.0.2.1", peerDualIP, 1)
}

func decode(t *testing.T, v string) lease.Attrs {
	t.Helper()
	a, err := lease.DecodeAttrs([]byte(v))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// leaseKeys lists the store and indexes the leases by their whole key.
func leaseKeys(t *testing.T, reg Registry) map[lease.Key]lease.Lease {
	t.Helper()
	l, err := reg.List(testCtx(t, 30*time.Second))
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	m := map[lease.Key]lease.Lease{}
	for _, x := range l.Leases {
		m[x.Key()] = x
	}
	return m
}

// TestRegistryV6Leases: on both APIs the registry lists, watches, creates, renews and
// deletes dual-stack and IPv6-only leases by their whole key, and reads the keys and
// values flanneld writes for them.
func TestRegistryV6Leases(t *testing.T) {
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		ctx := testCtx(t, 60*time.Second)
		s := newStore(t, srv, api)
		l, err := s.reg.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w := startWatch(t, s.reg, l.Rev)
		s.put(t, v6OnlyKey, peerV6Value)
		s.put(t, dualKey, peerDualValue())

		if c := w.next(t); c.Type != lease.Added || c.Bad != nil || c.Lease.Key() != v6OnlyKeyParsed ||
			!c.Lease.Attrs.Equal(decode(t, peerV6Value)) {
			t.Fatalf("first change %+v, want the IPv6-only lease %v", c, v6OnlyKeyParsed)
		}
		if c := w.next(t); c.Type != lease.Added || c.Lease.Key() != dualKeyParsed || !c.Lease.Attrs.Equal(decode(t, peerDualValue())) {
			t.Fatalf("second change %+v, want the dual-stack lease %v", c, dualKeyParsed)
		}
		got := leaseKeys(t, s.reg)
		if len(got) != 2 || !got[v6OnlyKeyParsed].Attrs.Equal(decode(t, peerV6Value)) || !got[dualKeyParsed].Attrs.Equal(decode(t, peerDualValue())) {
			t.Fatalf("List = %+v, want the IPv6-only and the dual-stack lease", got)
		}

		// Our own, written by the registry: a taken key is ErrTaken, renewal and
		// deletion go to the same key.
		mine := lease.Key{IPv6Subnet: pfx("fd00:db8:0:9::/64")}
		a := lease.Attrs{PublicIP: addr("0.0.0.0"), PublicIPv6: ourIPv6, BackendType: "vxlan", BackendV6Data: []byte(`{"VNI":1}`)}
		if _, err := s.reg.Create(ctx, mine, a, time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := s.reg.Create(ctx, mine, a, time.Hour); !errors.Is(err, ErrTaken) {
			t.Fatalf("second Create = %v, want ErrTaken", err)
		}
		if _, err := s.reg.Create(ctx, dualKeyParsed, a, time.Hour); !errors.Is(err, ErrTaken) {
			t.Fatalf("Create on flanneld's dual-stack key = %v, want ErrTaken", err)
		}
		if c := w.next(t); c.Type != lease.Added || c.Lease.Key() != mine || !c.Lease.Attrs.Equal(a) {
			t.Fatalf("after Create: %+v", c)
		}
		a.BackendV6Data = []byte(`{"VNI":2}`)
		if _, err := s.reg.Update(ctx, mine, a, time.Hour); err != nil {
			t.Fatal(err)
		}
		if c := w.next(t); c.Type != lease.Added || c.Lease.Key() != mine || string(c.Lease.Attrs.BackendV6Data) != `{"VNI":2}` {
			t.Fatalf("after Update: %+v", c)
		}
		if err := s.reg.Delete(ctx, mine); err != nil {
			t.Fatal(err)
		}
		if c := w.next(t); c.Type != lease.Removed || c.Lease.Key() != mine {
			t.Fatalf("after Delete: %+v, want Removed %v", c, mine)
		}
		s.del(t, dualKey)
		if c := w.next(t); c.Type != lease.Removed || c.Lease.Key() != dualKeyParsed {
			t.Fatalf("after deleting flanneld's key: %+v, want Removed %v", c, dualKeyParsed)
		}
		if _, ok := leaseKeys(t, s.reg)[v6OnlyKeyParsed]; !ok {
			t.Error("the IPv6-only lease went with the others")
		}
	})
}

// TestManagerV4IgnoresV6Only: an IPv4 network's manager sends a peer's dual-stack
// lease to the backend, never an IPv6-only one, and never leases a subnet again
// that a dual-stack lease holds. A dual-stack lease holding our PublicIP does not
// fit an IPv4 network: it is replaced by an IPv4 one, as flanneld does.
func TestManagerV4IgnoresV6Only(t *testing.T) {
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		ctx := testCtx(t, 2*time.Minute)
		s := newStore(t, srv, api)
		s.put(t, dualKey, peerDualValue())
		s.put(t, v6OnlyKey, peerV6Value)
		m := newManager(t, s, `{"Network":"198.18.0.0/16","SubnetMin":"198.18.207.0","SubnetMax":"198.18.208.0","Backend":{"Type":"vxlan"}}`, ManagerOptions{})
		own, err := m.Acquire(ctx, lease.Attrs{PublicIP: ourIP, BackendType: "vxlan"})
		if err != nil {
			t.Fatal(err)
		}
		if own.Key() != (lease.Key{Subnet: pfx("198.18.208.0/24")}) {
			t.Fatalf("leased %v, want 198.18.208.0-24 (198.18.207.0/24 is the peer's)", own.Key())
		}
		ch := watchEvents(t, m, own.Key())
		expectBatch(t, ch, describeEvents([]lease.Event{{Type: lease.Added, Lease: lease.Lease{Subnet: dualKeyParsed.Subnet, IPv6Subnet: dualKeyParsed.IPv6Subnet,
			Attrs: decode(t, peerDualValue())}}}))

		s2 := newStore(t, srv, api)
		s2.put(t, "/subnets/198.18.9.0-24&fd00:db8:0:9::-64", flanneldDualStackVXLAN)
		m2 := newManager(t, s2, `{"Network":"198.18.0.0/16","SubnetMin":"198.18.9.0","SubnetMax":"198.18.9.0","Backend":{"Type":"vxlan"}}`, ManagerOptions{})
		l, err := m2.Acquire(ctx, lease.Attrs{PublicIP: ourIP, BackendType: "vxlan"})
		if err != nil {
			t.Fatal(err)
		}
		want := lease.Key{Subnet: pfx("198.18.9.0/24")}
		if got := leaseKeys(t, s2.reg); l.Key() != want || len(got) != 1 || got[want].Attrs.PublicIP != ourIP {
			t.Errorf("Acquire = %v; leases %+v; want only the IPv4 lease %v", l.Key(), got, want)
		}
	})
}

// TestManagerDualStack: on both APIs a dual-stack network's manager leases an IPv4
// and an IPv6 subnet in one key beside a flanneld peer's, watches the peer, renews
// its lease, reuses it on a restart, and gets both subnets back from its state file
// once the key is gone.
func TestManagerDualStack(t *testing.T) {
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		ctx, cancel := context.WithCancel(testCtx(t, 2*time.Minute))
		defer cancel()
		s := newStore(t, srv, api)
		s.put(t, dualKey, peerDualValue())
		stateFile := filepath.Join(t.TempDir(), "lease.json")
		opts := ManagerOptions{StateFile: stateFile, TTL: 3 * time.Second, RenewMargin: 2 * time.Second}
		m := newManager(t, s, dualCfg, opts)
		attrs := lease.Attrs{PublicIP: ourIP, PublicIPv6: ourIPv6, BackendType: "vxlan", BackendV6Data: []byte(`{"VNI":1}`)}
		own, err := m.Acquire(ctx, attrs)
		if err != nil {
			t.Fatal(err)
		}
		cfg, _ := m.config()
		if !cfg.InRange(own.Subnet) || !cfg.InRangeV6(own.IPv6Subnet) || own.Subnet == dualKeyParsed.Subnet || own.IPv6Subnet == dualKeyParsed.IPv6Subnet {
			t.Fatalf("leased %v, want an IPv4 and an IPv6 subnet of the network, not the peer's", own.Key())
		}
		if got := leaseKeys(t, s.reg)[own.Key()]; !got.Attrs.Equal(own.Attrs) {
			t.Fatalf("stored %+v under %v, want %+v", got, own.Key(), own.Attrs)
		}
		ch := watchEvents(t, m, own.Key())
		expectBatch(t, ch, describeEvents([]lease.Event{{Type: lease.Added, Lease: lease.Lease{Subnet: dualKeyParsed.Subnet, IPv6Subnet: dualKeyParsed.IPv6Subnet,
			Attrs: decode(t, peerDualValue())}}}))

		done := make(chan struct{})
		go func() { defer close(done); _ = m.Hold(ctx, own, func(lease.Lease) {}) }()
		eventually(t, 20*time.Second, "two renewals of the dual-stack lease", func() bool { return m.Stats().Renewals >= 2 })
		cancel()
		<-done
		if st := m.Stats(); st.RenewFailures != 0 {
			t.Errorf("%d renewal failures", st.RenewFailures)
		}

		ctx = testCtx(t, time.Minute)
		again, err := newManager(t, s, "", opts).Acquire(ctx, attrs)
		if err != nil || again.Key() != own.Key() {
			t.Fatalf("restart: Acquire = %v, %v; want our lease %v back", again.Key(), err, own.Key())
		}
		if err := s.reg.Delete(ctx, own.Key()); err != nil {
			t.Fatal(err)
		}
		back, err := newManager(t, s, "", opts).Acquire(ctx, attrs)
		if err != nil || back.Key() != own.Key() {
			t.Fatalf("after the key was deleted: Acquire = %v, %v; want %v from the state file", back.Key(), err, own.Key())
		}
	})
}

// TestManagerIPv6Only: two hosts of an IPv6-only network lease IPv6 subnets under
// flanneld's 0.0.0.0-0&<v6> keys, see each other (and not themselves), and a host
// finds its lease again by its PublicIPv6.
func TestManagerIPv6Only(t *testing.T) {
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		ctx := testCtx(t, 2*time.Minute)
		s := newStore(t, srv, api)
		opts1 := ManagerOptions{StateFile: filepath.Join(t.TempDir(), "lease.json")}
		m1 := newManager(t, s, v6OnlyCfg, opts1)
		m2 := newManager(t, s, "", ManagerOptions{})
		a1 := lease.Attrs{PublicIP: addr("0.0.0.0"), PublicIPv6: addr("2001:db8::1"), BackendType: "vxlan"}
		a2 := lease.Attrs{PublicIP: addr("0.0.0.0"), PublicIPv6: addr("2001:db8::2"), BackendType: "vxlan"}
		l1, err := m1.Acquire(ctx, a1)
		if err != nil {
			t.Fatal(err)
		}
		l2, err := m2.Acquire(ctx, a2)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range []lease.Lease{l1, l2} {
			if l.Subnet.IsValid() || !l.IPv6Subnet.IsValid() || !strings.HasPrefix(l.Key().String(), "0.0.0.0-0&fd00:db8:") {
				t.Fatalf("leased %v, want an IPv6-only key", l.Key())
			}
		}
		if l1.IPv6Subnet == l2.IPv6Subnet {
			t.Fatalf("both hosts leased %v", l1.IPv6Subnet)
		}
		expectBatch(t, watchEvents(t, m1, l1.Key()), describeEvents([]lease.Event{{Type: lease.Added, Lease: l2}}))
		expectBatch(t, watchEvents(t, m2, l2.Key()), describeEvents([]lease.Event{{Type: lease.Added, Lease: l1}}))

		again, err := newManager(t, s, "", opts1).Acquire(ctx, a1)
		if err != nil || again.Key() != l1.Key() {
			t.Fatalf("restart of host 1: Acquire = %v, %v; want %v (found by PublicIPv6)", again.Key(), err, l1.Key())
		}
	})
}

// TestManagerTurnsOnIPv6: a host whose IPv4 lease predates EnableIPv6 swaps it for a
// dual-stack lease keeping its IPv4 subnet (from the state file), as flanneld keeps
// the one in subnet.env.
func TestManagerTurnsOnIPv6(t *testing.T) {
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		ctx := testCtx(t, time.Minute)
		s := newStore(t, srv, api)
		stateFile := filepath.Join(t.TempDir(), "lease.json")
		writeState(t, stateFile, lease.State{HostID: "h1", Network: pfx("198.18.0.0/16"), Subnet: pfx("198.18.44.0/24")})
		create(t, s, pfx("198.18.44.0/24"), lease.Attrs{PublicIP: ourIP, BackendType: "vxlan", HostID: "h1"})
		m := newManager(t, s, dualCfg, ManagerOptions{StateFile: stateFile})
		l, err := m.Acquire(ctx, lease.Attrs{PublicIP: ourIP, PublicIPv6: ourIPv6, BackendType: "vxlan"})
		if err != nil {
			t.Fatal(err)
		}
		if l.Subnet != pfx("198.18.44.0/24") || !l.IPv6Subnet.IsValid() {
			t.Fatalf("leased %v, want 198.18.44.0/24 with an IPv6 subnet", l.Key())
		}
		if got := leaseKeys(t, s.reg); len(got) != 1 {
			t.Errorf("leases %+v, want only the dual-stack one", got)
		}
		st, err := lease.LoadState(stateFile)
		if err != nil || st.IPv6Subnet != l.IPv6Subnet || st.IPv6Network != pfx("fd00:db8::/48") {
			t.Errorf("state file %+v, %v; want the IPv6 subnet %v recorded", st, err, l.IPv6Subnet)
		}
	})
}

// TestPickV6: the IPv6 pick finds the one free subnet of a range where taken
// prefixes of other lengths cover the rest, and reports a full range.
func TestPickV6(t *testing.T) {
	cfg, err := lease.ParseConfig([]byte(`{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:db8::/120","IPv6SubnetLen":126}`))
	if err != nil {
		t.Fatal(err)
	}
	// fd00:db8::4 .. ::fc are leasable; a /121 covers ::0-::7f, /126s ::80-::f8.
	taken := []netip.Prefix{pfx("fd00:db8::/121")}
	for i := 0x80; i < 0xfc; i += 4 {
		taken = append(taken, netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 0x0d, 0xb8, 15: byte(i)}), 126))
	}
	for range 20 {
		p, err := pickV6(cfg, taken)
		if err != nil || p != pfx("fd00:db8::fc/126") {
			t.Fatalf("pickV6 = %v, %v; want fd00:db8::fc/126", p, err)
		}
	}
	if p, err := pickV6(cfg, append(taken, pfx("fd00:db8::fc/126"))); !errors.Is(err, ErrNoFreeSubnet) {
		t.Fatalf("full range: pickV6 = %v, %v; want ErrNoFreeSubnet", p, err)
	}
	// A wide range: random picks, all in range and aligned.
	wide, err := lease.ParseConfig([]byte(`{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00::/16"}`))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Prefix]bool{}
	for range 50 {
		p, err := pickV6(wide, nil)
		if err != nil || !wide.InRangeV6(p) {
			t.Fatalf("pickV6 = %v, %v; want a /64 in range", p, err)
		}
		seen[p] = true
	}
	if len(seen) < 40 {
		t.Errorf("50 picks in a range of 2^48 gave only %d distinct subnets", len(seen))
	}
}
