package lab_test

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
)

// TestNATTopology: hosts of a site reach the internet (etcd included) through their
// masquerading router and each other without it; nothing outside reaches into a
// site; the router's counter counts what it routes and nothing else.
func TestNATTopology(t *testing.T) {
	testenv.NeedTools(t, "nft", "ping", "etcd")
	l := labtest.New(t, lab.Spec{Prefix: "wn", NoEtcd: true})
	ctx := context.Background()
	sites, err := l.BuildNAT(ctx, lab.NATSpec{Public: []string{"p"},
		Sites: []lab.SiteSpec{{Name: "a", Hosts: []string{"a1", "a2"}}, {Name: "b", Hosts: []string{"b1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := sites["a"], sites["b"]
	want := map[string]string{"p": "203.0.113.10", "a1": "192.0.2.10", "a2": "192.0.2.11", "b1": "198.51.100.10"}
	for name, addr := range want {
		if h := l.Host(name); h == nil || h.Addr.String() != addr {
			t.Fatalf("host %s: %+v, want address %s", name, h, addr)
		}
	}
	if a.Outside.String() != "203.0.113.2" || b.Outside.String() != "203.0.113.3" {
		t.Fatalf("routers' outside addresses %v %v", a.Outside, b.Outside)
	}
	if err := l.Put(ctx, lease.DefaultPrefix+"/config", lab.NetworkConfig("wireguard")); err != nil {
		t.Fatalf("etcd on the internet segment: %v", err)
	}
	a1, a2, b1, p := l.Host("a1").NS, l.Host("a2").NS, l.Host("b1").NS, l.Host("p").NS

	before, err := a.Forwarded(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ping(t, a1, "192.0.2.11") // within the site: not routed
	if n, err := a.Forwarded(ctx); err != nil || n != before {
		t.Fatalf("site a's router forwarded %d packets of a1 -> a2 (%v)", n-before, err)
	}
	ping(t, a1, "203.0.113.10") // out through the NAT
	ping(t, a2, "203.0.113.1")  // etcd's address
	ping(t, b1, "203.0.113.10")
	if n, err := a.Forwarded(ctx); err != nil || n < before+2 {
		t.Fatalf("site a's router forwarded %d packets of a1 -> p, want 2 (%v)", n-before, err)
	}
	// Nothing reaches into a site, not even from the other site.
	for _, dst := range []string{"192.0.2.10", "198.51.100.10"} {
		if out, err := p.Run(ctx, "ping", "-c1", "-W1", dst); err == nil {
			t.Fatalf("p reached %s inside a site:\n%s", dst, out)
		}
	}
	if out, err := a1.Run(ctx, "ping", "-c1", "-W1", "198.51.100.10"); err == nil {
		t.Fatalf("a1 reached b1 inside site b:\n%s", out)
	}

	// a1 and a2 on one inside port (weft's 51820), a2 first to each destination:
	// a1 keeps the port, a2 leaves from its own fixed one, to every destination.
	pa := l.Host("p")
	s1, s2 := udpSocket(t, l.Host("a1"), 51820), udpSocket(t, l.Host("a2"), 51820)
	for _, to := range []*net.UDPConn{udpSocket(t, pa, 7001), udpSocket(t, pa, 7002)} {
		for j, from := range []*net.UDPConn{s2, s1} {
			want := netip.AddrPortFrom(a.Outside, lab.OutsidePort(1-j, 51820))
			if got := udpSend(t, from, to, "hello"); got != want {
				t.Errorf("a%d's 51820 to %v came from %v, want %v", 2-j, udpAddr(to), got, want)
			}
		}
	}
	testenv.NeedTools(t, "conntrack")
	if err := a.FlushConntrack(ctx); err != nil {
		t.Fatal(err)
	}
}

// siteLab is a NAT lab of two sites, a (host a1) and b (host b1), for the checks of
// TestSiteModes.
type siteLab struct {
	l      *lab.Lab
	a, b   *lab.Site
	a1, b1 *lab.Host
}

// TestSiteModes: each SiteMode with real namespaces. Masquerade and random-fully
// hosts reach public hosts, which do not reach them; one socket of a masquerading
// host shows its own port to every destination, of a random-fully one a port for
// each; routed sites reach each other and the public hosts on their LAN addresses,
// both ways, and are seen on them. BlockUDP, on the lab's router and on a site's,
// drops UDP between two addresses both ways and nothing else, until lifted.
func TestSiteModes(t *testing.T) {
	testenv.NeedTools(t, "nft", "ping", "etcd", "conntrack")
	for _, tc := range []struct {
		name   string
		public []string
		modes  [2]lab.SiteMode
		check  func(*testing.T, *siteLab)
	}{
		{"masquerade", []string{"p", "q"}, [2]lab.SiteMode{"", lab.NATMasquerade}, checkNAT},
		{"random-fully", []string{"p", "q"}, [2]lab.SiteMode{lab.NATRandom, lab.NATRandom}, checkNAT},
		{"routed", []string{"p"}, [2]lab.SiteMode{lab.Routed, lab.Routed}, checkRouted},
		{"mixed without public hosts", nil, [2]lab.SiteMode{lab.Routed, lab.NATRandom}, checkMixed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := labtest.New(t, lab.Spec{Prefix: "wm", NoEtcd: true})
			sites, err := l.BuildNAT(context.Background(), lab.NATSpec{Public: tc.public, Sites: []lab.SiteSpec{
				{Name: "a", Hosts: []string{"a1"}, Mode: tc.modes[0]},
				{Name: "b", Hosts: []string{"b1"}, Mode: tc.modes[1]}}})
			if err != nil {
				t.Fatal(err)
			}
			s := &siteLab{l: l, a: sites["a"], b: sites["b"], a1: l.Host("a1"), b1: l.Host("b1")}
			for i, site := range []*lab.Site{s.a, s.b} {
				if want := cmp.Or(tc.modes[i], lab.NATMasquerade); site.Mode != want {
					t.Errorf("site %s: mode %q, want %q", site.Name, site.Mode, want)
				}
			}
			if len(l.Hosts()) != len(tc.public)+2 {
				t.Fatalf("%d hosts, want %d", len(l.Hosts()), len(tc.public)+2)
			}
			tc.check(t, s)
		})
	}
}

// checkNAT: both sites masquerade (site a as its Mode says).
func checkNAT(t *testing.T, s *siteLab) {
	ctx := context.Background()
	p, q := s.l.Host("p"), s.l.Host("q")
	before, err := s.a.Forwarded(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ping(t, s.a1.NS, p.Addr.String())
	ping(t, s.b1.NS, q.Addr.String())
	if n, err := s.a.Forwarded(ctx); err != nil || n < before+2 {
		t.Errorf("site a's router forwarded %d packets of a ping, want 2 (%v)", n-before, err)
	}
	for _, h := range []*lab.Host{s.a1, s.b1} {
		if out, err := p.NS.Run(ctx, "ping", "-c1", "-W1", h.Addr.String()); err == nil {
			t.Errorf("p reached %s inside a site:\n%s", h.Addr, out)
		}
	}

	// One socket of a1 to three destinations on two public hosts.
	sa := udpSocket(t, s.a1, 0)
	lp, lp2, lq := udpSocket(t, p, 7001), udpSocket(t, p, 7002), udpSocket(t, q, 7001)
	ports := map[uint16]bool{}
	for _, to := range []*net.UDPConn{lp, lp2, lq} {
		from := udpSend(t, sa, to, "hello")
		if from.Addr() != s.a.Outside {
			t.Errorf("a1's datagram to %v came from %v, want site a's outside address %v", to.LocalAddr(), from, s.a.Outside)
		}
		ports[from.Port()] = true
	}
	local := udpAddr(sa).Port()
	switch s.a.Mode {
	case lab.NATMasquerade:
		if len(ports) != 1 || !ports[local] {
			t.Errorf("masquerade: outside ports %v, want only the socket's own %d", ports, local)
		}
	case lab.NATRandom:
		// Three random ports all alike: once in four billion runs.
		if len(ports) < 2 {
			t.Errorf("random-fully: one outside port %v for three destinations", ports)
		}
	}

	// Two blocks on the lab's router, lifted one at a time: each lifts exactly its own.
	sb := udpSocket(t, s.b1, 0)
	unblockB, err := s.l.BlockUDP(ctx, s.b.Outside, p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	checkBlock(t, s.l.BlockUDP, s.l.DroppedUDP, s.a.Outside, p.Addr, []udpPath{{sa, lp}}, s.a1.NS, p.Addr.String())
	udpSendDropped(t, sb, lp, s.l.DroppedUDP, 1)
	if err := unblockB(ctx); err != nil {
		t.Fatal(err)
	}
	udpSend(t, sb, lp, "open")
	noBlockTables(t, s.l.Router())
	// A site router's block sees its hosts on their LAN addresses.
	checkBlock(t, s.a.BlockUDP, s.a.DroppedUDP, s.a1.Addr, p.Addr, []udpPath{{sa, lp}, {sa, lp2}}, s.a1.NS, p.Addr.String())
	noBlockTables(t, s.a.Router)
	if _, err := s.a.Forwarded(ctx); err != nil {
		t.Errorf("site a's counter after the block: %v", err)
	}
	if err := s.a.FlushConntrack(ctx); err != nil {
		t.Error(err)
	}
}

// checkRouted: both sites routed, one public host p.
func checkRouted(t *testing.T, s *siteLab) {
	ctx := context.Background()
	p := s.l.Host("p")
	before, err := s.b.Forwarded(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range [][2]*lab.Host{{s.a1, s.b1}, {s.b1, s.a1}, {s.a1, p}, {p, s.a1}, {p, s.b1}} {
		ping(t, x[0].NS, x[1].Addr.String())
	}
	if n, err := s.b.Forwarded(ctx); err != nil || n < before+6 {
		t.Errorf("site b's router forwarded %d packets of three pings, want 6 (%v)", n-before, err)
	}
	// Every datagram arrives from the sender's own address and port: no NAT.
	la, lb, lp := udpSocket(t, s.a1, 7001), udpSocket(t, s.b1, 7001), udpSocket(t, p, 7001)
	for _, x := range [][2]*net.UDPConn{{la, lb}, {lb, la}, {la, lp}, {lp, la}, {lp, lb}} {
		if from := udpSend(t, x[0], x[1], "hello"); from != udpAddr(x[0]) {
			t.Errorf("datagram to %v from %v arrived from %v", udpAddr(x[1]), udpAddr(x[0]), from)
		}
	}
	if out, err := s.a.Router.Run(ctx, "conntrack", "-L"); err != nil || strings.Contains(out, "203.0.113.2") {
		t.Errorf("site a's router tracks its outside address (NAT?): %v\n%s", err, out)
	}
	checkBlock(t, s.l.BlockUDP, s.l.DroppedUDP, s.a1.Addr, s.b1.Addr, []udpPath{{la, lb}, {lb, la}}, s.a1.NS, s.b1.Addr.String())
	noBlockTables(t, s.l.Router())
	checkBlock(t, s.b.BlockUDP, s.b.DroppedUDP, s.b1.Addr, s.a1.Addr, []udpPath{{la, lb}, {lb, la}}, s.b1.NS, s.a1.Addr.String())
	if err := s.b.FlushConntrack(ctx); err != nil {
		t.Error(err)
	}
}

// checkMixed: site a routed, site b random-fully, no public host; etcd still serves,
// b1 reaches a1's LAN address but not the other way round.
func checkMixed(t *testing.T, s *siteLab) {
	ctx := context.Background()
	if err := s.l.Put(ctx, lease.DefaultPrefix+"/config", lab.NetworkConfig("wireguard")); err != nil {
		t.Fatalf("etcd on the internet segment: %v", err)
	}
	ping(t, s.b1.NS, s.a1.Addr.String()) // from behind a NAT to a routed LAN
	if out, err := s.a1.NS.Run(ctx, "ping", "-c1", "-W1", s.b1.Addr.String()); err == nil {
		t.Errorf("a1 reached b1 inside site b:\n%s", out)
	}
	la, lb := udpSocket(t, s.a1, 7001), udpSocket(t, s.b1, 7001)
	if from := udpSend(t, lb, la, "hello"); from.Addr() != s.b.Outside {
		t.Errorf("b1's datagram came from %v, want site b's outside address %v", from, s.b.Outside)
	}
	if _, err := s.l.BlockUDP(ctx, netip.Addr{}, s.a1.Addr); !errors.Is(err, lab.ErrBlock) {
		t.Errorf("block without an address: %v, want ErrBlock", err)
	}
	// A block still in force at Close goes with the lab; lifting it then does nothing.
	unblock, err := s.l.BlockUDP(ctx, s.b.Outside, s.a1.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := unblock(ctx); err != nil {
		t.Errorf("unblock after Close: %v", err)
	}
}

// udpPath is a datagram's way: from one socket to another.
type udpPath struct{ from, to *net.UDPConn }

// checkBlock: block(a, b) drops UDP on every path (counted by dropped), lets a ping
// from pingNS to pingDst through, and its unblock lets UDP through again (nothing sent
// while blocked arrives), takes its counter with it and does nothing a second time.
func checkBlock(t *testing.T, block func(context.Context, netip.Addr, netip.Addr) (func(context.Context) error, error),
	dropped func(context.Context) (uint64, error), a, b netip.Addr, paths []udpPath, pingNS *netns.NS, pingDst string) {
	t.Helper()
	ctx := context.Background()
	before, err := dropped(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unblock, err := block(ctx, a, b)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range paths {
		udpSendDropped(t, p.from, p.to, dropped, before+uint64(i)+1)
	}
	ping(t, pingNS, pingDst)
	if err := unblock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		udpSend(t, p.from, p.to, "open")
	}
	if n, err := dropped(ctx); err != nil || n != before {
		t.Errorf("dropped %d after unblock, want %d (%v)", n, before, err)
	}
	if err := unblock(ctx); err != nil {
		t.Errorf("second unblock: %v", err)
	}
}

// udpSocket opens a UDP socket on h's address and port (0: any) inside h's
// namespace; it stays there, and is closed at cleanup.
func udpSocket(t *testing.T, h *lab.Host, port uint16) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := h.NS.Do(func() (err error) {
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(h.Addr, port)))
		return err
	})
	if err != nil {
		t.Fatalf("UDP socket on %s: %v", h.Name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// udpAddr is the address c is bound to.
func udpAddr(c *net.UDPConn) netip.AddrPort {
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// udpSend sends payload from one socket to another, waits for the first datagram to
// arrive there, which must be it, and returns where it came from as seen there.
func udpSend(t *testing.T, from, to *net.UDPConn, payload string) netip.AddrPort {
	t.Helper()
	if _, err := from.WriteToUDPAddrPort([]byte(payload), udpAddr(to)); err != nil {
		t.Fatalf("send %v -> %v: %v", udpAddr(from), udpAddr(to), err)
	}
	if err := to.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, src, err := to.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("%q from %v to %v: %v", payload, udpAddr(from), udpAddr(to), err)
	}
	if got := string(buf[:n]); got != payload {
		t.Errorf("%v got %q from %v first, want %q", udpAddr(to), got, src, payload)
	}
	return src
}

// udpSendDropped sends a datagram from one socket to another and waits for
// dropped to count want packets.
func udpSendDropped(t *testing.T, from, to *net.UDPConn, dropped func(context.Context) (uint64, error), want uint64) {
	t.Helper()
	if _, err := from.WriteToUDPAddrPort([]byte("blocked"), udpAddr(to)); err != nil {
		t.Fatalf("send %v -> %v: %v", udpAddr(from), udpAddr(to), err)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		n, err := dropped(context.Background())
		if err == nil && n < want {
			err = errors.New("dropped " + strconv.FormatUint(n, 10) + ", want " + strconv.FormatUint(want, 10))
		}
		return err
	})
}

// noBlockTables fails t if ns has a table of BlockUDP left.
func noBlockTables(t *testing.T, ns *netns.NS) {
	t.Helper()
	out, err := ns.Run(context.Background(), "nft", "list", "tables")
	if err != nil || strings.Contains(out, "weftblock") {
		t.Errorf("tables of %s: %v\n%s", ns.Name, err, out)
	}
}
