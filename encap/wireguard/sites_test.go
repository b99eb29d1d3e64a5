package wireguard

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap/zaptest"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/paths/way"
	"github.com/weftnet/weft/transport/relay"
)

// sitesBackend is a backend without devices (apply configures none) whose own lease
// is own, with a real path socket on a free port, for the logic of ways alone.
func sitesBackend(t testing.TB, own lease.Attrs) *backend {
	return sitesBackendOn(t, own, netip.MustParseAddr("127.0.0.1"))
}

// sitesBackendOn is sitesBackend with its path socket on addr (zero: every address
// of the namespace the caller runs in). On 127.0.0.1 nothing it sends to the test
// peers' addresses leaves the host (the kernel refuses a loopback source for them).
func sitesBackendOn(t testing.TB, own lease.Attrs, addr netip.Addr) *backend {
	cfg := &lease.Config{Network: netip.MustParsePrefix("198.18.0.0/16"), SubnetLen: 24, EnableIPv4: true,
		BackendType: wireguardType}
	priv, _ := wgtypes.GeneratePrivateKey()
	n, err := relay.Listen(relay.Config{Private: priv, WGPort: 51820, Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return &backend{cfg: cfg, opts: wireguardOptions{ListenPort: 51820, Mode: wgModeAuto}, log: zaptest.NewLogger(t),
		own:     lease.Lease{Subnet: netip.MustParsePrefix("198.18.1.0/24"), Attrs: own},
		applied: map[netip.Prefix][2]*wgPeerConf{}, owner: [2]map[wgtypes.Key]netip.Prefix{{}, {}},
		repairs: map[string]uint64{},
		leases:  map[netip.Prefix]lease.Lease{}, base: map[netip.Prefix][2]*wgPeerConf{},
		ways: map[netip.Prefix]*way.State{}, node: n, pathPort: relay.DefaultPort, priv: priv,
		keyFile: filepath.Join(t.TempDir(), "wgkey"), // the ways file goes beside it
	}
}

// natPeer adds to w b1, a peer of site b that publishes its NAT's address
// (203.0.113.3:51820), and returns its lease and way, relay first off (the tests
// that use it are not about relay first).
func natPeer(t *testing.T, w *backend) (lease.Lease, *way.State) {
	t.Helper()
	b1 := sitePeer(t, 3, "198.51.100.10", "b", "198.51.100.10", false)
	b1.Attrs.Outside = netip.MustParseAddrPort("203.0.113.3:51820")
	w.HandleEvents(t.Context(), []lease.Event{{Type: lease.Added, Lease: b1}})
	ws := w.ways[b1.Subnet]
	ws.First = false
	return b1, ws
}

// sitePeer is the lease of a wireguard peer at subnet 198.18.<n>.0/24.
func sitePeer(t *testing.T, n int, pub, site, siteIP string, nat bool) lease.Lease {
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(wgLeaseData{PublicKey: k.PublicKey().String(), Port: 51820})
	a := lease.Attrs{PublicIP: netip.MustParseAddr(pub), BackendType: wireguardType, BackendData: data, Site: site, NAT: nat}
	if siteIP != "" {
		a.SiteIP = netip.MustParseAddr(siteIP)
	}
	return lease.Lease{Subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(n), 0}), 24), Attrs: a}
}

// probedAt notes the probes' first round on the paths to peers ls at at (the
// prober's FirstRound stamps the real now; these tests run the chooser's clock).
func probedAt(w *backend, at time.Time, ls ...lease.Lease) {
	for _, l := range ls {
		w.ways[l.Subnet].FirstRound(at)
	}
}

// endpointOf is the IPv4 device's endpoint for peer l now (learnt: invalid).
func endpointOf(w *backend, l lease.Lease) netip.AddrPort {
	c := w.onWay(l.Subnet, w.base[l.Subnet])[0]
	if c == nil || c.learn {
		return netip.AddrPort{}
	}
	return c.endpoint
}

// TestWaysOnEvidence: a host of site a dials every peer outside its site at what it
// publishes; a peer with no answer for way.TryFor is punched at its NAT's address when
// it publishes one, then relayed; one the probes find down moves on at once; the
// peers of its site are dialed on their site address, never chosen.
func TestWaysOnEvidence(t *testing.T) {
	w := sitesBackend(t, lease.Attrs{Site: "a", SiteIP: netip.MustParseAddr("192.0.2.10")})
	p := sitePeer(t, 5, "203.0.113.10", "", "", false)
	a2 := sitePeer(t, 2, "192.0.2.11", "a", "192.0.2.11", false)
	b1 := sitePeer(t, 3, "198.51.100.10", "b", "198.51.100.10", false)
	b1.Attrs.Outside = netip.MustParseAddrPort("203.0.113.3:1024")
	c1 := sitePeer(t, 4, "198.51.100.20", "c", "198.51.100.20", false) // publishes no NAT address
	var evs []lease.Event
	for _, l := range []lease.Lease{p, a2, b1, c1} {
		evs = append(evs, lease.Event{Type: lease.Added, Lease: l})
	}
	w.HandleEvents(t.Context(), evs)
	if w.ways[a2.Subnet] != nil || endpointOf(w, a2).String() != "192.0.2.11:51820" || w.base[a2.Subnet][0].keepalive != 0 {
		t.Fatalf("a2 (our site): way %v, conf %+v", w.ways[a2.Subnet], w.base[a2.Subnet][0])
	}
	for _, l := range []lease.Lease{p, b1, c1} {
		ws := w.ways[l.Subnet]
		if ws == nil || ws.Way != way.Direct || endpointOf(w, l) != netip.AddrPortFrom(l.Attrs.PublicIP, 51820) ||
			w.base[l.Subnet][0].keepalive != natKeepalive {
			t.Fatalf("%v: way %+v, conf %+v; want direct to its PublicIP with a keepalive", l.Subnet, ws, w.base[l.Subnet][0])
		}
	}
	// Each way's clock starts when its lease is handled: start is the latest of them
	// (slow machines, qemu in make cross, take more than a millisecond between them).
	start := w.ways[p.Subnet].Since
	for _, l := range []lease.Lease{b1, c1} {
		if s := w.ways[l.Subnet].Since; s.After(start) {
			start = s
		}
	}
	w.PeerState(p.Subnet, true)
	probedAt(w, start.Add(time.Second), b1, c1) // their first rounds: no answer
	w.choose(start.Add(way.TryFor - time.Second))
	if w.ways[b1.Subnet].Way != way.Direct {
		t.Fatalf("b1 left direct before way.TryFor: %+v", w.ways[b1.Subnet])
	}
	w.choose(start.Add(way.TryFor + time.Millisecond))
	if ws := w.ways[p.Subnet]; ws.Way != way.Direct {
		t.Fatalf("p answered, yet: %+v", ws)
	}
	if ws := w.ways[b1.Subnet]; ws.Way != way.Punched || endpointOf(w, b1) != b1.Attrs.Outside || !strings.Contains(ws.Why, "punched: direct") {
		t.Fatalf("b1 after %v without an answer: %+v endpoint %v, want punched at %v", way.TryFor, ws, endpointOf(w, b1), b1.Attrs.Outside)
	}
	ws := w.ways[c1.Subnet]
	if ws.Way != way.Relay || !strings.Contains(ws.Why, "no NAT address") {
		t.Fatalf("c1 (no NAT address to punch): %+v, want relayed", ws)
	}
	if ep := endpointOf(w, c1); !ep.Addr().IsLoopback() {
		t.Fatalf("c1 relayed: endpoint %v, want our loopback socket", ep)
	}
	// The punched way fails too: relayed, and the reason says punched.
	probedAt(w, w.ways[b1.Subnet].Since.Add(time.Second), b1)
	w.choose(w.ways[b1.Subnet].Since.Add(way.TryFor + time.Millisecond))
	if ws := w.ways[b1.Subnet]; ws.Way != way.Relay || !strings.Contains(ws.Why, "punched (203.0.113.3:1024)") {
		t.Fatalf("b1: %+v, want relayed after punching failed", ws)
	}
	// A way that answered and then is found down moves on at once.
	w.PeerState(p.Subnet, false)
	w.choose(time.Now())
	if ws := w.ways[p.Subnet]; ws.Way != way.Relay || !strings.Contains(ws.Why, "found it down") {
		t.Fatalf("p found down: %+v, want relayed (it publishes no NAT address)", ws)
	}
	if pc := w.pathChanges; pc != 4 {
		t.Fatalf("%d path changes, want 4", pc)
	}
	// b1's lease gone: nothing kept of it.
	w.HandleEvents(t.Context(), []lease.Event{{Type: lease.Removed, Lease: b1}})
	if w.ways[b1.Subnet] != nil || w.base[b1.Subnet][0] != nil {
		t.Fatalf("after b1 gone: %+v", w.ways[b1.Subnet])
	}
}

// TestWaysNoSite: a host without a site dials every peer at its PublicIP and waits
// for one that says never dial it; it chooses nothing.
func TestWaysNoSite(t *testing.T) {
	w := sitesBackend(t, lease.Attrs{})
	a1 := sitePeer(t, 2, "192.0.2.10", "a", "192.0.2.10", true)
	d := sitePeer(t, 4, "203.0.113.12", "c", "10.0.0.4", false)
	l := sitePeer(t, 6, "192.0.2.2", "", "", false)
	w.HandleEvents(t.Context(), []lease.Event{{Type: lease.Added, Lease: a1}, {Type: lease.Added, Lease: d}, {Type: lease.Added, Lease: l}})
	if c := w.base[a1.Subnet][0]; c == nil || !c.learn || w.peerConfig(c).Endpoint != nil {
		t.Fatalf("a host that says never dial it: conf %+v, want its endpoint learnt, none configured", c)
	}
	for _, x := range []lease.Lease{d, l} {
		if c := w.base[x.Subnet][0]; c == nil || c.learn || c.endpoint != netip.AddrPortFrom(x.Attrs.PublicIP, 51820) || c.keepalive != 0 {
			t.Fatalf("%v: conf %+v, want flanneld's", x.Subnet, c)
		}
	}
	if len(w.ways) != 0 {
		t.Fatalf("ways chosen without a site: %v", w.ways)
	}
}

func TestParseUAPIPeers(t *testing.T) {
	k1, _ := wgtypes.GeneratePrivateKey()
	k2, _ := wgtypes.GeneratePrivateKey()
	text := "private_key=00\nlisten_port=51820\npublic_key=" + hexKey(k1.PublicKey()) +
		"\nendpoint=203.0.113.2:40001\nlast_handshake_time_sec=1800000000\nlast_handshake_time_nsec=5\n" +
		"public_key=" + hexKey(k2.PublicKey()) + "\nendpoint=bad\npublic_key=zz\nerrno=0\n"
	got := parseUAPIPeers([]byte(text))
	if s := got[k1.PublicKey()]; s.endpoint.String() != "203.0.113.2:40001" || s.handshake.Unix() != 1800000000 {
		t.Errorf("peer 1: %+v", s)
	}
	if s, ok := got[k2.PublicKey()]; !ok || s.endpoint.IsValid() || !s.handshake.IsZero() {
		t.Errorf("peer 2: %+v %v", s, ok)
	}
	if len(got) != 2 {
		t.Errorf("%d peers, want 2", len(got))
	}
}

func hexKey(k wgtypes.Key) string { return hex.EncodeToString(k[:]) }

// TestDirectBackoff: a move back to direct on the path port's answers that brings no
// answer through the tunnel is left for the relay, and the direct way is not tried
// again before way.DirectBackoff from the move (it was at once: the failure reset it).
func TestDirectBackoff(t *testing.T) {
	w := sitesBackend(t, lease.Attrs{Site: "a", SiteIP: netip.MustParseAddr("192.0.2.10")})
	c1 := sitePeer(t, 4, "198.51.100.20", "c", "198.51.100.20", false) // publishes no NAT address
	w.HandleEvents(t.Context(), []lease.Event{{Type: lease.Added, Lease: c1}})
	ws := w.ways[c1.Subnet]
	moved := ws.Since.Add(time.Minute)
	w.ways[c1.Subnet].Move(way.Direct, "direct: answers again (2 pings on the path port in a row)", moved)
	ws.DirectAfter, ws.DirectBack = moved.Add(way.DirectBackoff), true
	probedAt(w, moved.Add(time.Second), c1)
	w.choose(moved.Add(way.TryFor + time.Millisecond))
	if ws.Way != way.Relay {
		t.Fatalf("after a move back without an answer: %+v, want relayed", ws)
	}
	if want := moved.Add(way.DirectBackoff); !ws.DirectAfter.Equal(want) {
		t.Fatalf("direct tried again after %v, want %v (way.DirectBackoff from the move back)", ws.DirectAfter.Sub(moved), way.DirectBackoff)
	}
}

// fakeDev is a device whose peers' handshakes the test sets: the pure logic of the
// ways reads them (a fake for a unit test; the e2e sites labs run the real devices).
type fakeDev struct{ peers map[wgtypes.Key]peerStatus }

func (d *fakeDev) Name() string                   { return Device }
func (d *fakeDev) Kind() string                   { return Userspace }
func (d *fakeDev) Link() (netlink.Link, error)    { return nil, errors.New("no link in this test") }
func (d *fakeDev) Configure(wgtypes.Config) error { return nil }
func (d *fakeDev) Peers() (map[wgtypes.Key]peerStatus, error) {
	return maps.Clone(d.peers), nil
}
func (d *fakeDev) Close() error  { return nil }
func (d *fakeDev) Remove() error { return nil }
func (d *fakeDev) Kept() bool    { return false }

// TestHandshakeIsAnAnswer: a handshake at the way's endpoint since the way was taken
// keeps a peer the probes have not reached yet on it past way.TryFor; a handshake the
// probes found down after (or one at another endpoint) does not.
func TestHandshakeIsAnAnswer(t *testing.T) {
	w := sitesBackend(t, lease.Attrs{Site: "a", SiteIP: netip.MustParseAddr("192.0.2.10")})
	dev := &fakeDev{peers: map[wgtypes.Key]peerStatus{}}
	w.devs[0] = dev
	b1 := sitePeer(t, 3, "198.51.100.10", "b", "198.51.100.10", false)
	c1 := sitePeer(t, 4, "198.51.100.20", "c", "198.51.100.20", false)
	w.HandleEvents(t.Context(), []lease.Event{{Type: lease.Added, Lease: b1}, {Type: lease.Added, Lease: c1}})
	// The ways were taken a minute ago (the probes' PeerState stamps the real now).
	start := time.Now().Add(-time.Minute)
	w.ways[b1.Subnet].Since, w.ways[c1.Subnet].Since = start, start
	shook := start.Add(time.Second)
	dev.peers[w.base[b1.Subnet][0].key] = peerStatus{endpoint: netip.MustParseAddrPort("198.51.100.10:51820"), handshake: shook}
	dev.peers[w.base[c1.Subnet][0].key] = peerStatus{endpoint: netip.MustParseAddrPort("127.0.0.1:40000"), handshake: shook} // elsewhere
	probedAt(w, shook, c1)
	w.choose(start.Add(way.TryFor + time.Millisecond))
	if ws := w.ways[b1.Subnet]; ws.Way != way.Direct || !ws.Answered {
		t.Fatalf("b1 handshook on its direct way: %+v, want direct and answered", ws)
	}
	if ws := w.ways[c1.Subnet]; ws.Way == way.Direct {
		t.Fatalf("c1 handshook at another endpoint only: %+v, want it to leave direct after way.TryFor", ws)
	}
	// The probes find b1 down after that handshake: it moves on.
	w.PeerState(b1.Subnet, false)
	w.choose(time.Now())
	if ws := w.ways[b1.Subnet]; ws.Way == way.Direct {
		t.Fatalf("b1 found down after its handshake: %+v, want it to leave direct", ws)
	}
}

// TestTryNewFollowsPace: where the probes read the paths slowly (thousands of peers),
// a new way the probes have not judged is given their first round and
// way.TryForSlack, not way.TryFor: a working way is not left before it was probed.
func TestTryNewFollowsPace(t *testing.T) {
	for _, c := range []struct {
		name string
		pace time.Duration
		want time.Duration
	}{{"few peers", 2*time.Second + 100*time.Millisecond, way.TryFor}, {"thousands", 10*time.Second + 100*time.Millisecond, 13*time.Second + 100*time.Millisecond}} {
		t.Run(c.name, func(t *testing.T) {
			w := sitesBackend(t, lease.Attrs{Site: "a", SiteIP: netip.MustParseAddr("192.0.2.10")})
			w.ProbePace(c.pace)
			b1 := sitePeer(t, 3, "198.51.100.10", "b", "198.51.100.10", false)
			b1.Attrs.Outside = netip.MustParseAddrPort("203.0.113.3:1024")
			w.HandleEvents(t.Context(), []lease.Event{{Type: lease.Added, Lease: b1}})
			ws := w.ways[b1.Subnet]
			ws.First = false // relay first is not this test's
			w.choose(ws.Since.Add(c.want - 500*time.Millisecond))
			if ws.Way != way.Direct {
				t.Fatalf("left direct %v after it was taken, before %v: %+v", c.want-500*time.Millisecond, c.want, ws)
			}
			probedAt(w, ws.Since.Add(c.pace+time.Second), b1)
			w.choose(ws.Since.Add(c.want + time.Millisecond))
			if ws := w.ways[b1.Subnet]; ws.Way != way.Punched {
				t.Fatalf("direct after %v without an answer: %+v, want punched", c.want, ws)
			}
		})
	}
}

// TestSeenAt: the hello answers tell where the device sees a peer only for a peer it
// handshook with lately (an endpoint without a handshake is what we configured,
// not where the peer's datagrams come from), from the last tick's snapshot.
func TestSeenAt(t *testing.T) {
	w := sitesBackend(t, lease.Attrs{})
	if got := w.seenAt(relay.Key{1}); got.IsValid() {
		t.Fatalf("before any snapshot: %v", got)
	}
	now := time.Now()
	ep := netip.MustParseAddrPort("203.0.113.3:51820")
	w.keepSeen(map[wgtypes.Key]peerStatus{
		{1}: {endpoint: ep, handshake: now.Add(-time.Minute)},
		{2}: {endpoint: ep},
		{3}: {endpoint: ep, handshake: now.Add(-seenFor - time.Second)},
	}, now)
	for k, want := range map[byte]netip.AddrPort{1: ep, 2: {}, 3: {}, 4: {}} {
		if got := w.seenAt(relay.Key{k}); got != want {
			t.Errorf("peer %d: seen at %v, want %v", k, got, want)
		}
	}
}

// TestPunchHold: a punched way that never answered holds the path port's word on
// punching that peer (10 s after the first such failure, doubling); one that
// answered and then was found down worked, and the relayed spell after it starts
// the schedule afresh: the next attempt way.PunchFirst after, no hold.
func TestPunchHold(t *testing.T) {
	for _, c := range []struct {
		name     string
		answered bool
	}{{"never answered", false}, {"answered, then down", true}} {
		t.Run(c.name, func(t *testing.T) {
			w := sitesBackend(t, lease.Attrs{Site: "a", SiteIP: netip.MustParseAddr("192.0.2.10")})
			b1, ws := natPeer(t, w)
			t0 := time.Now().Add(-time.Second)
			w.ways[b1.Subnet].Move(way.Punched, "punched: test", t0)
			probedAt(w, t0.Add(time.Millisecond), b1)
			now := t0.Add(way.TryFor + time.Millisecond)
			if c.answered {
				w.PeerState(b1.Subnet, true)
				time.Sleep(time.Millisecond)
				w.PeerState(b1.Subnet, false)
				now = time.Now()
			}
			w.choose(now)
			if ws.Way != way.Relay {
				t.Fatalf("after the punched way failed: %+v, want relayed", ws)
			}
			switch {
			case !c.answered && (!ws.PunchHold.Equal(now.Add(2*way.PunchFirst)) || ws.PunchFails != 1):
				t.Fatalf("hold until %v (%d failures), want %v (1)", ws.PunchHold.Sub(now), ws.PunchFails, 2*way.PunchFirst)
			case c.answered && (!ws.PunchHold.IsZero() || ws.PunchFails != 0 || !ws.PunchAt.Equal(now.Add(way.PunchFirst))):
				t.Fatalf("hold %v, failures %d, next attempt in %v; want none, none, %v", ws.PunchHold, ws.PunchFails, ws.PunchAt.Sub(now), way.PunchFirst)
			}
		})
	}
}

// TestRelayAt: the lease whose path port an address is, as leases come, change and go.
func TestRelayAt(t *testing.T) {
	w := sitesBackend(t, lease.Attrs{Site: "a", SiteIP: netip.MustParseAddr("192.0.2.10")})
	p := sitePeer(t, 8, "203.0.113.10", "", "", false)
	q := sitePeer(t, 9, "203.0.113.11", "", "", false)
	at := func(a string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(a), relay.DefaultPort) }
	w.HandleEvents(t.Context(), []lease.Event{{Type: lease.Added, Lease: p}, {Type: lease.Added, Lease: q}})
	if got := w.relayAt(at("203.0.113.10")); got != p.Subnet {
		t.Fatalf("relayAt(p) = %v, want %v", got, p.Subnet)
	}
	if got := w.relayAt(netip.AddrPortFrom(netip.MustParseAddr("203.0.113.10"), 51820)); got.IsValid() {
		t.Fatalf("relayAt(p's WireGuard port) = %v, want none", got)
	}
	moved := q
	moved.Attrs.PublicIP = netip.MustParseAddr("203.0.113.12")
	w.HandleEvents(t.Context(), []lease.Event{{Type: lease.Removed, Lease: p}, {Type: lease.Added, Lease: moved}})
	for addr, want := range map[string]netip.Prefix{"203.0.113.10": {}, "203.0.113.11": {}, "203.0.113.12": q.Subnet} {
		if got := w.relayAt(at(addr)); got != want {
			t.Errorf("relayAt(%s) = %v, want %v", addr, got, want)
		}
	}
}

// TestFirstRoundProbed: the probes' first round on a peer's path is noted on its
// way; a peer of our own site (no way) and an unknown subnet are left alone.
func TestFirstRoundProbed(t *testing.T) {
	w := sitesBackend(t, lease.Attrs{Site: "a", SiteIP: netip.MustParseAddr("192.0.2.10")})
	b1 := sitePeer(t, 3, "198.51.100.10", "b", "198.51.100.10", false)
	a2 := sitePeer(t, 4, "192.0.2.11", "a", "192.0.2.11", false)
	w.HandleEvents(t.Context(), []lease.Event{{Type: lease.Added, Lease: b1}, {Type: lease.Added, Lease: a2}})
	if w.ways[a2.Subnet] != nil {
		t.Fatal("a peer of our site has a way")
	}
	w.FirstRound(netip.MustParsePrefix("198.18.99.0/24"))
	w.FirstRound(a2.Subnet)
	before := time.Now()
	w.FirstRound(b1.Subnet)
	if ws := w.ways[b1.Subnet]; ws.JudgedAt.Before(before) {
		t.Fatalf("b1's way judged at %v, want at or after %v", ws.JudgedAt, before)
	}
}
