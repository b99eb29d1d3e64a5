package wireguard

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap/zaptest"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/transport/relay"
)

// sitesBackend is a backend without devices (apply configures none) whose own lease
// is own, with a real path socket on a free port, for the logic of ways alone.
func sitesBackend(t *testing.T, own lease.Attrs) *backend {
	cfg := &lease.Config{Network: netip.MustParsePrefix("198.18.0.0/16"), SubnetLen: 24, EnableIPv4: true,
		BackendType: wireguardType}
	priv, _ := wgtypes.GeneratePrivateKey()
	n, err := relay.Listen(relay.Config{Private: priv, WGPort: 51820})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return &backend{cfg: cfg, opts: wireguardOptions{ListenPort: 51820, Mode: wgModeAuto}, log: zaptest.NewLogger(t),
		own:     lease.Lease{Subnet: netip.MustParsePrefix("198.18.1.0/24"), Attrs: own},
		applied: map[netip.Prefix][2]*wgPeerConf{}, owner: [2]map[wgtypes.Key]netip.Prefix{{}, {}},
		repairs: map[string]uint64{},
		leases:  map[netip.Prefix]lease.Lease{}, base: map[netip.Prefix][2]*wgPeerConf{},
		ways: map[netip.Prefix]*wayState{}, node: n, pathPort: relay.DefaultPort, priv: priv,
		keyFile: filepath.Join(t.TempDir(), "wgkey"), // the ways file goes beside it
	}
}

// helloed runs w's path socket and has a real node on loopback answer its hello, so
// that w knows where its path socket is seen from outside (pathOutside).
func helloed(t *testing.T, w *backend) {
	t.Helper()
	priv, _ := wgtypes.GeneratePrivateKey()
	r, err := relay.Listen(relay.Config{Private: priv, WGPort: 51820})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, n := range []*relay.Node{r, w.node} {
		wg.Go(func() { _ = n.Run(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait(); _ = r.Close() })
	at := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(r.Port()))
	for deadline := time.Now().Add(10 * time.Second); !w.pathOutside(netip.Prefix{}).IsValid(); {
		if time.Now().After(deadline) {
			t.Fatal("no answer to hello from a node on loopback in 10 s")
		}
		if err := w.node.Hello(relay.Key(priv.PublicKey()), at); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// natPeer adds to w b1, a peer of site b that publishes its NAT's address
// (203.0.113.3:51820), and returns its lease and way, relay first off (the tests
// that use it are not about relay first).
func natPeer(t *testing.T, w *backend) (lease.Lease, *wayState) {
	t.Helper()
	b1 := sitePeer(t, 3, "198.51.100.10", "b", "198.51.100.10", false)
	b1.Attrs.Outside = netip.MustParseAddrPort("203.0.113.3:51820")
	w.HandleEvents(t.Context(), []lease.Event{{Type: lease.Added, Lease: b1}})
	ws := w.ways[b1.Subnet]
	ws.first = false
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

// endpointOf is the IPv4 device's endpoint for peer l now (learnt: invalid).
func endpointOf(w *backend, l lease.Lease) netip.AddrPort {
	c := w.onWay(l.Subnet, w.base[l.Subnet])[0]
	if c == nil || c.learn {
		return netip.AddrPort{}
	}
	return c.endpoint
}

// TestWaysOnEvidence: a host of site a dials every peer outside its site at what it
// publishes; a peer with no answer for tryFor is punched at its NAT's address when
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
		if ws == nil || ws.way != wayDirect || endpointOf(w, l) != netip.AddrPortFrom(l.Attrs.PublicIP, 51820) ||
			w.base[l.Subnet][0].keepalive != natKeepalive {
			t.Fatalf("%v: way %+v, conf %+v; want direct to its PublicIP with a keepalive", l.Subnet, ws, w.base[l.Subnet][0])
		}
	}
	// Each way's clock starts when its lease is handled: start is the latest of them
	// (slow machines, qemu in make cross, take more than a millisecond between them).
	start := w.ways[p.Subnet].since
	for _, l := range []lease.Lease{b1, c1} {
		if s := w.ways[l.Subnet].since; s.After(start) {
			start = s
		}
	}
	w.PeerState(p.Subnet, true)
	w.choose(start.Add(tryFor - time.Second))
	if w.ways[b1.Subnet].way != wayDirect {
		t.Fatalf("b1 left direct before tryFor: %+v", w.ways[b1.Subnet])
	}
	w.choose(start.Add(tryFor + time.Millisecond))
	if ws := w.ways[p.Subnet]; ws.way != wayDirect {
		t.Fatalf("p answered, yet: %+v", ws)
	}
	if ws := w.ways[b1.Subnet]; ws.way != wayPunched || endpointOf(w, b1) != b1.Attrs.Outside || !strings.Contains(ws.why, "punched: direct") {
		t.Fatalf("b1 after %v without an answer: %+v endpoint %v, want punched at %v", tryFor, ws, endpointOf(w, b1), b1.Attrs.Outside)
	}
	ws := w.ways[c1.Subnet]
	if ws.way != wayRelay || !strings.Contains(ws.why, "no NAT address") {
		t.Fatalf("c1 (no NAT address to punch): %+v, want relayed", ws)
	}
	if ep := endpointOf(w, c1); !ep.Addr().IsLoopback() {
		t.Fatalf("c1 relayed: endpoint %v, want our loopback socket", ep)
	}
	// The punched way fails too: relayed, and the reason says punched.
	w.choose(w.ways[b1.Subnet].since.Add(tryFor + time.Millisecond))
	if ws := w.ways[b1.Subnet]; ws.way != wayRelay || !strings.Contains(ws.why, "punched (203.0.113.3:1024)") {
		t.Fatalf("b1: %+v, want relayed after punching failed", ws)
	}
	// A way that answered and then is found down moves on at once.
	w.PeerState(p.Subnet, false)
	w.choose(time.Now())
	if ws := w.ways[p.Subnet]; ws.way != wayRelay || !strings.Contains(ws.why, "found it down") {
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
	got := parseUAPIPeers(text)
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
// again before directBackoff from the move (it was at once: the failure reset it).
func TestDirectBackoff(t *testing.T) {
	w := sitesBackend(t, lease.Attrs{Site: "a", SiteIP: netip.MustParseAddr("192.0.2.10")})
	c1 := sitePeer(t, 4, "198.51.100.20", "c", "198.51.100.20", false) // publishes no NAT address
	w.HandleEvents(t.Context(), []lease.Event{{Type: lease.Added, Lease: c1}})
	ws := w.ways[c1.Subnet]
	moved := ws.since.Add(time.Minute)
	w.setWay(c1.Subnet, wayDirect, "direct: answers again (2 pings on the path port in a row)", moved)
	ws.directAfter, ws.directBack = moved.Add(directBackoff), true
	w.choose(moved.Add(tryFor + time.Millisecond))
	if ws.way != wayRelay {
		t.Fatalf("after a move back without an answer: %+v, want relayed", ws)
	}
	if want := moved.Add(directBackoff); !ws.directAfter.Equal(want) {
		t.Fatalf("direct tried again after %v, want %v (directBackoff from the move back)", ws.directAfter.Sub(moved), directBackoff)
	}
}

// TestPunchAgainSchedule: a relayed peer that publishes its NAT's address is tried
// on the path port punchFirst after it was relayed, then at twice the wait each time
// up to punchMax; an attempt without an answer says so in the way's why, once; a new
// NAT address of the peer's asks at the next tick and starts the waits again; with
// our NAT mapping each destination anew nothing is tried, and the why says why.
func TestPunchAgainSchedule(t *testing.T) {
	w := sitesBackend(t, lease.Attrs{Site: "a", SiteIP: netip.MustParseAddr("192.0.2.10")})
	helloed(t, w)
	b1, ws := natPeer(t, w)
	t0 := ws.since.Add(time.Minute)
	w.setWay(b1.Subnet, wayRelay, "relay via p: test", t0)
	ws.relayAddr = netip.MustParseAddrPort("203.0.113.10:51822")
	pk := relay.Key(w.base[b1.Subnet][0].key)
	// attempts steps the chooser's logic of the relayed peer from..to, a tick a
	// second, and returns when each attempt opened.
	attempts := func(from, to time.Time) []time.Duration {
		var out []time.Duration
		for now := from; !now.After(to); now = now.Add(chooseEvery) {
			before := ws.punchSince
			w.punchAgain(b1.Subnet, ws, pk, now)
			if !ws.punchSince.Equal(before) {
				out = append(out, now.Sub(t0))
			}
		}
		return out
	}
	got := attempts(t0, t0.Add(3*time.Minute))
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 140 * time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("attempts at %v, want %v (punchFirst, doubling to punchMax)", got, want)
	}
	if ws.way != wayRelay || strings.Count(ws.why, "punched tried") != 1 {
		t.Fatalf("after attempts with no answer: way %v, why %q; want relayed, saying so once", ws.way, ws.why)
	}
	// The peer's NAT address changes: asked at the next tick, the waits start again.
	now := t0.Add(3*time.Minute + 500*time.Millisecond)
	old := b1
	b1.Attrs.Outside = netip.MustParseAddrPort("203.0.113.3:40000")
	w.leases[b1.Subnet] = b1
	w.newOutside(b1.Subnet, old, b1)
	if got := attempts(now, now.Add(6*time.Second)); len(got) != 2 || got[1]-got[0] != punchFirst {
		t.Fatalf("after a new NAT address: attempts at %v, want one at once and one punchFirst later", got)
	}
	// Our NAT maps each destination anew: nothing tried, and the why says so.
	w.mapsPerDestination = "our NAT gives each destination a port of its own (test)"
	later := now.Add(10 * time.Minute)
	if got := attempts(later, later.Add(2*time.Minute)); len(got) != 0 {
		t.Fatalf("with a NAT that maps each destination anew: attempts at %v, want none", got)
	}
	if !strings.Contains(ws.why, "not punched: our NAT gives each destination") || strings.Contains(ws.why, "punched tried") {
		t.Fatalf("why %q: want it to say why it is not punched, and only that", ws.why)
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
// keeps a peer the probes have not reached yet on it past tryFor; a handshake the
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
	w.ways[b1.Subnet].since, w.ways[c1.Subnet].since = start, start
	shook := start.Add(time.Second)
	dev.peers[w.base[b1.Subnet][0].key] = peerStatus{endpoint: netip.MustParseAddrPort("198.51.100.10:51820"), handshake: shook}
	dev.peers[w.base[c1.Subnet][0].key] = peerStatus{endpoint: netip.MustParseAddrPort("127.0.0.1:40000"), handshake: shook} // elsewhere
	w.choose(start.Add(tryFor + time.Millisecond))
	if ws := w.ways[b1.Subnet]; ws.way != wayDirect || !ws.answered {
		t.Fatalf("b1 handshook on its direct way: %+v, want direct and answered", ws)
	}
	if ws := w.ways[c1.Subnet]; ws.way == wayDirect {
		t.Fatalf("c1 handshook at another endpoint only: %+v, want it to leave direct after tryFor", ws)
	}
	// The probes find b1 down after that handshake: it moves on.
	w.PeerState(b1.Subnet, false)
	w.choose(time.Now())
	if ws := w.ways[b1.Subnet]; ws.way == wayDirect {
		t.Fatalf("b1 found down after its handshake: %+v, want it to leave direct", ws)
	}
}

// TestPunchWaitsForOutside: an attempt due before anyone told us where our path
// socket is seen from outside is not spent (a "punch now" would name no address):
// it opens at the first tick after we know.
func TestPunchWaitsForOutside(t *testing.T) {
	w := sitesBackend(t, lease.Attrs{Site: "a", SiteIP: netip.MustParseAddr("192.0.2.10")})
	b1, ws := natPeer(t, w)
	t0 := ws.since.Add(time.Minute)
	w.setWay(b1.Subnet, wayRelay, "relay via p: test", t0)
	ws.relayAddr = netip.MustParseAddrPort("203.0.113.10:51822")
	pk := relay.Key(w.base[b1.Subnet][0].key)
	now := t0
	for ; now.Before(t0.Add(20 * time.Second)); now = now.Add(chooseEvery) {
		w.punchAgain(b1.Subnet, ws, pk, now)
	}
	if !ws.punchSince.IsZero() || ws.punchAt.After(now) {
		t.Fatalf("without our outside address: an attempt opened at %v, next due %v (now %v); want none, due at once", ws.punchSince, ws.punchAt, now)
	}
	helloed(t, w)
	w.punchAgain(b1.Subnet, ws, pk, now)
	if !ws.punchSince.Equal(now) {
		t.Fatalf("once we know our outside address: attempt at %v, want %v", ws.punchSince, now)
	}
}

// TestTryNewFollowsPace: where the probes read the paths slowly (thousands of peers),
// a new way the probes have not judged is given their first round and
// tryForSlack, not tryFor: a working way is not left before it was probed.
func TestTryNewFollowsPace(t *testing.T) {
	for _, c := range []struct {
		name string
		pace time.Duration
		want time.Duration
	}{{"few peers", 2*time.Second + 100*time.Millisecond, tryFor}, {"thousands", 10*time.Second + 100*time.Millisecond, 13*time.Second + 100*time.Millisecond}} {
		t.Run(c.name, func(t *testing.T) {
			w := sitesBackend(t, lease.Attrs{Site: "a", SiteIP: netip.MustParseAddr("192.0.2.10")})
			w.ProbePace(c.pace)
			b1 := sitePeer(t, 3, "198.51.100.10", "b", "198.51.100.10", false)
			b1.Attrs.Outside = netip.MustParseAddrPort("203.0.113.3:1024")
			w.HandleEvents(t.Context(), []lease.Event{{Type: lease.Added, Lease: b1}})
			ws := w.ways[b1.Subnet]
			ws.first = false // relay first is not this test's
			w.choose(ws.since.Add(c.want - 500*time.Millisecond))
			if ws.way != wayDirect {
				t.Fatalf("left direct %v after it was taken, before %v: %+v", c.want-500*time.Millisecond, c.want, ws)
			}
			w.choose(ws.since.Add(c.want + time.Millisecond))
			if ws := w.ways[b1.Subnet]; ws.way != wayPunched {
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
// the schedule afresh: the next attempt punchFirst after, no hold.
func TestPunchHold(t *testing.T) {
	for _, c := range []struct {
		name     string
		answered bool
	}{{"never answered", false}, {"answered, then down", true}} {
		t.Run(c.name, func(t *testing.T) {
			w := sitesBackend(t, lease.Attrs{Site: "a", SiteIP: netip.MustParseAddr("192.0.2.10")})
			b1, ws := natPeer(t, w)
			t0 := time.Now().Add(-time.Second)
			w.setWay(b1.Subnet, wayPunched, "punched: test", t0)
			now := t0.Add(tryFor + time.Millisecond)
			if c.answered {
				w.PeerState(b1.Subnet, true)
				time.Sleep(time.Millisecond)
				w.PeerState(b1.Subnet, false)
				now = time.Now()
			}
			w.choose(now)
			if ws.way != wayRelay {
				t.Fatalf("after the punched way failed: %+v, want relayed", ws)
			}
			switch {
			case !c.answered && (!ws.punchHold.Equal(now.Add(2*punchFirst)) || ws.punchFails != 1):
				t.Fatalf("hold until %v (%d failures), want %v (1)", ws.punchHold.Sub(now), ws.punchFails, 2*punchFirst)
			case c.answered && (!ws.punchHold.IsZero() || ws.punchFails != 0 || !ws.punchAt.Equal(now.Add(punchFirst))):
				t.Fatalf("hold %v, failures %d, next attempt in %v; want none, none, %v", ws.punchHold, ws.punchFails, ws.punchAt.Sub(now), punchFirst)
			}
		})
	}
}
