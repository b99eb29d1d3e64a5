package wireguard

import (
	"encoding/hex"
	"encoding/json"
	"net/netip"
	"slices"
	"testing"

	"go.uber.org/zap/zaptest"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/lease"
)

// sitesBackend is a backend without devices (apply configures none) whose own lease
// is own, for the logic of sites alone.
func sitesBackend(t *testing.T, own lease.Attrs) *backend {
	cfg := &lease.Config{Network: netip.MustParsePrefix("198.18.0.0/16"), SubnetLen: 24, EnableIPv4: true,
		BackendType: wireguardType}
	return &backend{cfg: cfg, opts: wireguardOptions{ListenPort: 51820, Mode: wgModeAuto}, log: zaptest.NewLogger(t),
		own:     lease.Lease{Subnet: netip.MustParsePrefix("198.18.1.0/24"), Attrs: own},
		applied: map[netip.Prefix][2]*wgPeerConf{}, owner: [2]map[wgtypes.Key]netip.Prefix{{}, {}},
		repairs: map[string]uint64{}, mtus: map[netip.Prefix]int{},
		leases: map[netip.Prefix]lease.Lease{}, base: map[netip.Prefix][2]*wgPeerConf{},
		relayed: map[netip.Prefix]lease.Lease{}, down: map[netip.Prefix]bool{}, relays: &relayCounter{},
	}
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

func TestSitesFromBehindNAT(t *testing.T) {
	w := sitesBackend(t, lease.Attrs{Site: "a", SiteIP: netip.MustParseAddr("192.0.2.10"), NAT: true})
	p := sitePeer(t, 5, "203.0.113.10", "", "", false)
	q := sitePeer(t, 6, "203.0.113.11", "", "", false)
	a2 := sitePeer(t, 2, "192.0.2.11", "a", "192.0.2.11", true)
	b1 := sitePeer(t, 3, "198.51.100.10", "b", "198.51.100.10", true)
	var evs []lease.Event
	for _, l := range []lease.Lease{p, q, a2, b1} {
		evs = append(evs, lease.Event{Type: lease.Added, Lease: l})
	}
	w.HandleEvents(t.Context(), evs)

	for _, tc := range []struct {
		l         lease.Lease
		want      reach
		endpoint  string
		keepalive bool
	}{
		{p, reachDirect, "203.0.113.10:51820", true},
		{a2, reachSite, "192.0.2.11:51820", false},
		{b1, reachRelay, "", false},
	} {
		if got := w.reachOf(tc.l); got != tc.want {
			t.Errorf("%v: reach %v, want %v", tc.l.Subnet, got, tc.want)
		}
		c := w.base[tc.l.Subnet][0]
		if tc.endpoint == "" {
			if c != nil {
				t.Errorf("%v: a peer of its own %+v, want none (relayed)", tc.l.Subnet, c)
			}
			continue
		}
		if c == nil || c.endpoint.String() != tc.endpoint || c.learn || (c.keepalive == natKeepalive) != tc.keepalive {
			t.Errorf("%v: conf %+v, want endpoint %s keepalive %v", tc.l.Subnet, c, tc.endpoint, tc.keepalive)
		}
	}
	// B1 goes through the lowest dialable subnet, P.
	if w.relay != p.Subnet || !slices.Contains(w.applied[p.Subnet][0].allowed, b1.Subnet) {
		t.Fatalf("relay %v with %v, want P %v carrying %v", w.relay, w.applied[p.Subnet][0].allowed, p.Subnet, b1.Subnet)
	}
	// P found down: Q takes over, P gets its own AllowedIPs back.
	w.PeerState(p.Subnet, false)
	if w.relay != q.Subnet || !slices.Contains(w.applied[q.Subnet][0].allowed, b1.Subnet) || slices.Contains(w.applied[p.Subnet][0].allowed, b1.Subnet) {
		t.Fatalf("after P down: relay %v, P %v, Q %v", w.relay, w.applied[p.Subnet][0].allowed, w.applied[q.Subnet][0].allowed)
	}
	// P back: it is the lowest again.
	w.PeerState(p.Subnet, true)
	if w.relay != p.Subnet {
		t.Fatalf("after P up: relay %v", w.relay)
	}
	// B1's lease gone: nothing to relay, P keeps only its own subnet.
	w.HandleEvents(t.Context(), []lease.Event{{Type: lease.Removed, Lease: b1}})
	if w.relay.IsValid() || len(w.applied[p.Subnet][0].allowed) != 1 {
		t.Fatalf("after B1 gone: relay %v, P %v", w.relay, w.applied[p.Subnet][0].allowed)
	}
}

func TestSitesFromDialable(t *testing.T) {
	w := sitesBackend(t, lease.Attrs{}) // P: no site
	a1 := sitePeer(t, 2, "192.0.2.10", "a", "192.0.2.10", true)
	d := sitePeer(t, 4, "203.0.113.12", "c", "10.0.0.4", false) // a site host with --public-ip
	w.HandleEvents(t.Context(), []lease.Event{{Type: lease.Added, Lease: a1}, {Type: lease.Added, Lease: d}})
	if c := w.base[a1.Subnet][0]; c == nil || !c.learn || w.peerConfig(c).Endpoint != nil {
		t.Fatalf("a host behind NAT: conf %+v, want its endpoint learnt, none configured", c)
	}
	if c := w.base[d.Subnet][0]; c == nil || c.learn || c.endpoint.String() != "203.0.113.12:51820" || c.keepalive != 0 {
		t.Fatalf("a dialable site host: conf %+v", c)
	}
	if w.relay.IsValid() {
		t.Fatalf("relay %v with nothing to relay", w.relay)
	}
}

func TestSitesNoneAnywhere(t *testing.T) {
	w := sitesBackend(t, lease.Attrs{})
	l := sitePeer(t, 2, "192.0.2.2", "", "", false)
	w.HandleEvents(t.Context(), []lease.Event{{Type: lease.Added, Lease: l}})
	c := w.base[l.Subnet][0]
	if c == nil || c.endpoint.String() != "192.0.2.2:51820" || c.learn || c.keepalive != 0 {
		t.Fatalf("conf %+v, want flanneld's", c)
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

func TestRelayCounter(t *testing.T) {
	c := &relayCounter{networks: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/16")}}
	own := []netip.Prefix{netip.MustParsePrefix("198.18.1.0/24")}
	c.own.Store(&own)
	pkt := func(src string) []byte {
		b := make([]byte, 40)
		b[0] = 0x45
		a := netip.MustParseAddr(src).As4()
		copy(b[12:], a[:])
		return b
	}
	for _, p := range [][]byte{pkt("198.18.1.2"), pkt("192.0.2.1"), pkt("198.18.3.0"), {0x45}, nil} {
		c.count(p)
	}
	if c.packets.Load() != 1 || c.bytes.Load() != 40 {
		t.Fatalf("counted %d packets %d bytes, want the one from 198.18.3.0", c.packets.Load(), c.bytes.Load())
	}
}

func hexKey(k wgtypes.Key) string { return hex.EncodeToString(k[:]) }
