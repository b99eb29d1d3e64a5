package proxy

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/weftnet/weft/tun/offload/offloadtest"
)

// IPv6 overlay of the tests: fd00:10::/48 in /64 leases (flannel's default), ours
// fd00:10:0:1::/64, the peer's fd00:10:0:2::/64 behind tPeerIP (IPv4 underlay), a
// third host's fd00:10:0:3::/64 behind tPeer6IP (IPv6 underlay).
var (
	t6Network = netip.MustParsePrefix("fd00:10::/48")
	t6Local   = netip.MustParsePrefix("fd00:10:0:1::/64")
	t6Peer    = netip.MustParsePrefix("fd00:10:0:2::/64")
	t6Peer3   = netip.MustParsePrefix("fd00:10:0:3::/64")
	t6LocalIP = netip.MustParseAddr("fd00:10:0:1::5")
	t6PeerPod = netip.MustParseAddr("fd00:10:0:2::5")
	t6Pod3    = netip.MustParseAddr("fd00:10:0:3::5")
	tPeer6IP  = netip.MustParseAddr("2001:db8::3")
)

// testSnapshot6 is testSnapshot with the IPv6 side above.
func testSnapshot6(t testing.TB) *Snapshot {
	tb, err := NewTable(tNetwork, 24)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.EnableIPv6(t6Network, 64); err != nil {
		t.Fatal(err)
	}
	for _, p := range []netip.Prefix{tLocal, t6Local} {
		if err := tb.SetLocal(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.Apply([]Route{{tPeer, tPeerIP}, {t6Peer, tPeerIP}, {t6Peer3, tPeer6IP}}, nil); err != nil {
		t.Fatal(err)
	}
	return tb.Load()
}

func lookup6(s *Snapshot, a netip.Addr) *Peer {
	hi, lo := halves(a)
	return s.Lookup6(hi, lo)
}

func TestTable6Lookup(t *testing.T) {
	s := testSnapshot6(t)
	for _, c := range []struct {
		dst  string
		want string
	}{
		{"fd00:10:0:2::5", "192.0.2.2"},
		{"fd00:10:0:2:ffff:ffff:ffff:ffff", "192.0.2.2"},
		{"fd00:10:0:3::1", "2001:db8::3"},
		{"fd00:10:0:1::5", ""},    // ours
		{"fd00:10:0:4::1", ""},    // no lease
		{"fd00:11:0:2::5", ""},    // outside the network
		{"fd00:10:1:2::5", ""},    // same subnet bits, beyond the /48
		{"::ffff:198.18.2.5", ""}, // IPv4-mapped: not the IPv6 side
	} {
		got := ""
		if p := lookup6(s, netip.MustParseAddr(c.dst)); p != nil {
			got = p.PublicIP.String()
		}
		if got != c.want {
			t.Errorf("Lookup6(%s) = %q, want %q", c.dst, got, c.want)
		}
	}
	if s.Len() != 3 || !s.HoldsLease(ipconvU32(tPeerIP)) || !s.HoldsLease6(tPeer6IP.As16()) {
		t.Fatalf("Len %d, routes %v", s.Len(), s.Routes())
	}
	if a := testing.AllocsPerRun(100, func() { _ = lookup6(s, t6PeerPod) }); a != 0 {
		t.Errorf("Lookup6 allocates %v times", a)
	}
}

func ipconvU32(a netip.Addr) uint32 { b := a.As4(); return binary.BigEndian.Uint32(b[:]) }

// TestTable6Layouts covers subnet lengths on either side of the 64-bit halves.
func TestTable6Layouts(t *testing.T) {
	for _, c := range []struct {
		network string
		len     int
		subnet  string
		in, out string
	}{
		{"fd00::/44", 64, "fd00:0:0:f0::/64", "fd00:0:0:f0:1::1", "fd00:0:0:f1::1"},
		{"fd00:1:2:3::/56", 72, "fd00:1:2:3:ab00::/72", "fd00:1:2:3:abff::9", "fd00:1:2:3:ac00::9"},
		{"fd00:1:2:3:4::/80", 96, "fd00:1:2:3:4:ff::/96", "fd00:1:2:3:4:ff:1:2", "fd00:1:2:3:4:fe::1"},
		{"fd00:1:2:3:4:5:6:0/112", 128, "fd00:1:2:3:4:5:6:77/128", "fd00:1:2:3:4:5:6:77", "fd00:1:2:3:4:5:6:78"},
		{"fd00::/64", 64, "fd00::/64", "fd00::1", "fd00:0:0:1::1"},
	} {
		tb, err := NewTable(tNetwork, 24)
		if err != nil {
			t.Fatal(err)
		}
		if err := tb.EnableIPv6(netip.MustParsePrefix(c.network), c.len); err != nil {
			t.Fatalf("%s/%d: %v", c.network, c.len, err)
		}
		if err := tb.Apply([]Route{{netip.MustParsePrefix(c.subnet), tPeer6IP}}, nil); err != nil {
			t.Fatalf("%s: %v", c.subnet, err)
		}
		s := tb.Load()
		if lookup6(s, netip.MustParseAddr(c.in)) == nil {
			t.Errorf("%s: %s not found", c.subnet, c.in)
		}
		if lookup6(s, netip.MustParseAddr(c.out)) != nil {
			t.Errorf("%s: %s found", c.subnet, c.out)
		}
		if err := tb.Apply(nil, []netip.Prefix{netip.MustParsePrefix(c.subnet)}); err != nil || tb.Load().Len() != 0 {
			t.Errorf("%s: remove: %v, %d left", c.subnet, err, tb.Load().Len())
		}
	}
}

func TestTable6Errors(t *testing.T) {
	tb, err := NewTable(tNetwork, 24)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Apply([]Route{{t6Peer, tPeerIP}}, nil); !errors.Is(err, ErrBadRoute) {
		t.Errorf("IPv6 route without an IPv6 network: %v", err)
	}
	if err := tb.SetLocal(t6Local); !errors.Is(err, ErrBadRoute) {
		t.Errorf("IPv6 local subnet without an IPv6 network: %v", err)
	}
	for _, c := range []struct {
		network string
		len     int
	}{{"198.18.0.0/16", 24}, {"fd00::/32", 64}, {"fd00::/64", 63}, {"fd00::/120", 129}, {"::ffff:0:0/96", 112}} {
		if err := tb.EnableIPv6(netip.MustParsePrefix(c.network), c.len); !errors.Is(err, ErrBadRoute) {
			t.Errorf("EnableIPv6(%s, %d) = %v, want ErrBadRoute", c.network, c.len, err)
		}
	}
	if err := tb.EnableIPv6(t6Network, 64); err != nil {
		t.Fatal(err)
	}
	if err := tb.EnableIPv6(t6Network, 64); !errors.Is(err, ErrBadRoute) {
		t.Errorf("second EnableIPv6: %v", err)
	}
	for _, r := range []Route{
		{netip.MustParsePrefix("fd00:10:0:2::/63"), tPeerIP}, // wrong length
		{netip.MustParsePrefix("fd00:11:0:2::/64"), tPeerIP}, // outside
		{t6Peer, netip.MustParseAddr("fe80::1")},             // link-local underlay
		{t6Peer, netip.MustParseAddr("ff02::1")},             // multicast underlay
		{t6Peer, netip.Addr{}},                               // none
	} {
		if err := tb.Apply([]Route{r}, nil); !errors.Is(err, ErrBadRoute) {
			t.Errorf("Apply(%v) = %v, want ErrBadRoute", r, err)
		}
	}
	if n := tb.Load().Len(); n != 0 {
		t.Errorf("%d routes after refused ones", n)
	}
	// Replacing a lease moves its count from one public address to the other.
	if err := tb.Apply([]Route{{t6Peer, tPeerIP}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := tb.Apply([]Route{{t6Peer, tPeer6IP}}, nil); err != nil {
		t.Fatal(err)
	}
	s := tb.Load()
	if s.Len() != 1 || s.HoldsLease(ipconvU32(tPeerIP)) || !s.HoldsLease6(tPeer6IP.As16()) {
		t.Errorf("after replace: %d routes, v4 lease %v, v6 lease %v", s.Len(), s.HoldsLease(ipconvU32(tPeerIP)), s.HoldsLease6(tPeer6IP.As16()))
	}
}

func TestRouteEgress6(t *testing.T) {
	s := testSnapshot6(t)
	for _, c := range []struct {
		name string
		pkt  []byte
		want DropReason
		peer string
	}{
		{"to peer", offloadtest.IPv6(t6LocalIP, t6PeerPod, 64, layers.IPProtocolUDP, []byte("x")), DropNone, "192.0.2.2"},
		{"to v6 underlay peer", offloadtest.IPv6(t6LocalIP, t6Pod3, 64, layers.IPProtocolUDP, nil), DropNone, "2001:db8::3"},
		{"no lease", offloadtest.IPv6(t6LocalIP, netip.MustParseAddr("fd00:10:0:9::1"), 64, layers.IPProtocolUDP, nil), DropNoRoute, ""},
		{"ours", offloadtest.IPv6(t6LocalIP, t6LocalIP, 64, layers.IPProtocolUDP, nil), DropNotOverlay, ""},
		{"outside", offloadtest.IPv6(t6LocalIP, netip.MustParseAddr("2001:db8::1"), 64, layers.IPProtocolUDP, nil), DropNotOverlay, ""},
		{"hop limit", offloadtest.IPv6(t6LocalIP, t6PeerPod, 1, layers.IPProtocolUDP, nil), DropTTL, ""},
		{"short", offloadtest.IPv6(t6LocalIP, t6PeerPod, 64, layers.IPProtocolUDP, nil)[:39], DropMalformed, ""},
	} {
		pkt := append([]byte(nil), c.pkt...)
		p, r := s.RouteEgress(pkt)
		if r != c.want {
			t.Errorf("%s: reason %v, want %v", c.name, r, c.want)
			continue
		}
		if r == DropNone {
			if p.PublicIP.String() != c.peer || pkt[7] != c.pkt[7]-1 {
				t.Errorf("%s: peer %v hop %d", c.name, p.PublicIP, pkt[7])
			}
		}
	}
	// A table without an IPv6 side: IPv6 packets are not the overlay's.
	if _, r := testSnapshot(t).RouteEgress(offloadtest.IPv6(t6LocalIP, t6PeerPod, 64, layers.IPProtocolUDP, nil)); r != DropNotOverlay {
		t.Errorf("no IPv6 network: %v", r)
	}
}

func TestCheckIngress6(t *testing.T) {
	s := testSnapshot6(t)
	good := offloadtest.IPv6(t6PeerPod, t6LocalIP, 64, layers.IPProtocolUDP, make([]byte, 12))
	src := ipconvU32(tPeerIP)
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, c := range []struct {
		name string
		pkt  []byte
		src  uint32
		want DropReason
	}{
		{"good", good, src, DropNone},
		{"unknown sender", good, ipconvU32(netip.MustParseAddr("192.0.2.77")), DropUnknownSource},
		{"unknown sender, malformed", good[:30], ipconvU32(netip.MustParseAddr("192.0.2.77")), DropUnknownSource},
		{"short", good[:39], src, DropTruncated},
		{"payload length beyond", good[:45], src, DropTruncated},
		{"trailing bytes", append(append([]byte(nil), good...), 0), src, DropBadLength},
		{"jumbogram", mut(func(b []byte) []byte { b[4], b[5] = 0, 0; return b }), src, DropBadLength},
		{"spoofed source", offloadtest.IPv6(t6Pod3, t6LocalIP, 64, layers.IPProtocolUDP, nil), src, DropSpoofedSource},
		{"source outside", offloadtest.IPv6(netip.MustParseAddr("fd00:99::1"), t6LocalIP, 64, layers.IPProtocolUDP, nil), src, DropSpoofedSource},
		{"not ours", offloadtest.IPv6(t6PeerPod, netip.MustParseAddr("fd00:10:0:9::1"), 64, layers.IPProtocolUDP, nil), src, DropNotLocal},
		{"multicast", offloadtest.IPv6(t6PeerPod, netip.MustParseAddr("ff02::1"), 64, layers.IPProtocolUDP, nil), src, DropNotUnicast},
		{"hop limit", offloadtest.IPv6(t6PeerPod, t6LocalIP, 1, layers.IPProtocolUDP, nil), src, DropTTL},
		{"version 7", mut(func(b []byte) []byte { b[0] = 0x70; return b }), src, DropMalformed},
	} {
		if r := s.CheckIngress(c.pkt, c.src); r != c.want {
			t.Errorf("%s: %v, want %v", c.name, r, c.want)
		}
	}
	// A sender whose subnet is behind an IPv6 underlay address cannot send it over IPv4.
	if r := s.CheckIngress(offloadtest.IPv6(t6Pod3, t6LocalIP, 64, layers.IPProtocolUDP, nil), src); r != DropSpoofedSource {
		t.Errorf("v6-underlay subnet from a v4 sender: %v", r)
	}
	if r := testSnapshot(t).CheckIngress(good, src); r != DropMalformed {
		t.Errorf("no IPv6 network: %v", r)
	}
	pkt := append([]byte(nil), good...)
	decHop(pkt)
	if pkt[7] != 63 || string(pkt[8:]) != string(good[8:]) {
		t.Errorf("decHop: % x", pkt[:8])
	}
}

// TestTableIPv6Only: a table made without an IPv4 network (an IPv6-only overlay)
// holds no IPv4 address, refuses IPv4 subnets with a clear error, and carries its
// IPv6 side as a dual-stack table does.
func TestTableIPv6Only(t *testing.T) {
	tb, err := NewTable(netip.Prefix{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.EnableIPv6(t6Network, 64); err != nil {
		t.Fatal(err)
	}
	if err := tb.SetLocal(t6Local); err != nil {
		t.Fatal(err)
	}
	for _, p := range []netip.Prefix{tLocal, netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("0.0.0.0/32")} {
		if err := tb.SetLocal(p); !errors.Is(err, ErrBadRoute) {
			t.Errorf("SetLocal(%v) = %v, want ErrBadRoute", p, err)
		}
	}
	err = tb.Apply([]Route{{tPeer, tPeerIP}, {t6Peer3, tPeer6IP}}, nil)
	if !errors.Is(err, ErrBadRoute) {
		t.Errorf("Apply with an IPv4 subnet = %v, want ErrBadRoute", err)
	}
	s := tb.Load()
	if s.Len() != 1 {
		t.Fatalf("table holds %d routes, want the IPv6 one: %v", s.Len(), s.Routes())
	}
	for _, a := range []string{"0.0.0.0", "0.0.0.1", "10.0.0.1", "192.0.2.5", "255.255.255.255"} {
		u := binary.BigEndian.Uint32(netip.MustParseAddr(a).AsSlice())
		if s.Lookup(u) != nil || s.InNetwork(u) || s.IsLocal(u) {
			t.Errorf("IPv4 %s is found in an IPv6-only table", a)
		}
	}
	if p := lookup6(s, t6Pod3); p == nil || p.PublicIP != tPeer6IP {
		t.Fatalf("Lookup6(%v) = %v, want the peer behind %v", t6Pod3, p, tPeer6IP)
	}
}
