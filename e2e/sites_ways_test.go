package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/transport/relay"
)

// symmetricSpec: both sites behind NATs that give each destination a port of its own
// (masquerade random-fully): punching cannot work, a1 and b1 meet through p or q.
var symmetricSpec = lab.NATSpec{Public: []string{"p", "q"},
	Sites: []lab.SiteSpec{{Name: "a", Hosts: []string{"a1"}, Mode: lab.NATRandom}, {Name: "b", Hosts: []string{"b1"}, Mode: lab.NATRandom}}}

// routedSpec: two sites routed to each other without NAT (one cloud network across
// two regions), with public hosts or, routedAloneSpec, none at all.
var (
	routedSpec = lab.NATSpec{Public: []string{"p", "q"},
		Sites: []lab.SiteSpec{{Name: "a", Hosts: []string{"a1"}, Mode: lab.Routed}, {Name: "b", Hosts: []string{"b1"}, Mode: lab.Routed}}}
	routedAloneSpec = lab.NATSpec{
		Sites: []lab.SiteSpec{{Name: "a", Hosts: []string{"a1"}, Mode: lab.Routed}, {Name: "b", Hosts: []string{"b1"}, Mode: lab.Routed}}}
)

func isRelayed(p string) bool { return strings.HasPrefix(p, "relay via ") }
func isDirect(p string) bool  { return p == "direct" }

// TestSitesSymmetric: a1 and b1 behind NATs that map each destination anew are
// relayed within 30 s of the start, GET /peers says why, the relay forwards their
// WireGuard datagrams without seeing a packet of their pods, their pods' pings
// pass a hand-over on a1 and a hand-over, a restart and a kill of the relay, and a
// relay killed for good is replaced within 30 s.
func TestSitesSymmetric(t *testing.T) {
	s := newSiteLab(t, true, symmetricSpec)
	s.explain(t)
	s.steps(t, []siteStep{
		{"first reply", sitesFirstReply},
		{"every pair", sitesMesh},
		{"relayed, and why", sitesSymmetricWhy},
		{"the relay sees no traffic", sitesRelayBlind},
		{"TCP through the relay", sitesRelayTCP},
		{"hand-over of a relayed host", sitesRelayedHandOver},
		{"hand-over of the relay", sitesRelayHandOver},
		{"restart of the relay", sitesRelayRestart},
		{"relay killed and started again", sitesRelayKilled},
		{"relay gone", sitesRelayGone},
	})
}

// sitesSymmetricWhy: a1 and b1 say relay via p or q, and why: punching gave no answer.
// A peer whose NAT address is not in its lease yet when direct fails is relayed at
// once ("publishes no NAT address") and punched when the address comes: within 30 s
// both have tried punching and are relayed again.
func sitesSymmetricWhy(t *testing.T, s *siteLab) {
	var p sitePeer
	eventually(t, 30*time.Second, func() error {
		for _, pair := range [][2]string{{"a1", "b1"}, {"b1", "a1"}} {
			e, err := s.peerOn(pair[0], pair[1])
			if err != nil {
				return err
			}
			if !isRelayed(e.Path) || e.State != "up" || !strings.Contains(e.PathDetail, "punched") {
				return fmt.Errorf("%s on %s: path %q (%s), state %q; want relayed, up, after punching", pair[1], pair[0], e.Path, e.PathDetail, e.State)
			}
			if pair[0] == "a1" {
				p = e
			}
		}
		return nil
	})
	t.Logf("b1 on a1: %s (%s)", p.Path, p.PathDetail)
}

// sitesRelayBlind: on the relays, an nftables counter of every packet between a1's
// and b1's subnets (on any device, WireGuard's included, both hooks a packet of theirs
// would pass) stays at 0 while 200 pings go between their pods, the relay's forward
// counter rises with them, and `wg show` on the relay has no AllowedIPs of one for the
// other.
func sitesRelayBlind(t *testing.T, s *siteLab) {
	// Each direction chooses its relay: both public hosts are watched.
	a, b := s.subnet["a1"], s.subnet["b1"]
	ruleset := `table inet weftspy {
	counter pods {}
	chain pre { type filter hook prerouting priority -400; ip saddr { ` + a + `, ` + b + ` } ip daddr { ` + a + `, ` + b + ` } counter name "pods"; }
	chain out { type filter hook output priority -400; ip saddr { ` + a + `, ` + b + ` } ip daddr { ` + a + `, ` + b + ` } counter name "pods"; }
}
`
	ctx := context.Background()
	for _, relay := range []string{"p", "q"} {
		r := s.h[relay]
		cmd := r.ns.Command(ctx, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(ruleset)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft on %s: %v: %s", relay, err, out)
		}
		t.Cleanup(func() { _, _ = r.ns.Run(context.Background(), "nft", "delete", "table", "inet", "weftspy") })
	}
	before := s.relayedBy(t)
	got := pingCount(t, s.h["a1"], s.pod["b1"], 200, false)
	after := s.relayedBy(t)
	var seen uint64
	for _, relay := range []string{"p", "q"} {
		out, err := s.h[relay].ns.Run(ctx, "nft", "list", "counter", "inet", "weftspy", "pods")
		if err != nil {
			t.Fatal(err)
		}
		seen += counterPackets(t, out)
	}
	t.Logf("a1 -> b1: %d of 200 pings answered; p and q relayed %v datagrams and saw %d packets of their pods", got, after-before, seen)
	if got < 190 || after-before < float64(2*got) {
		t.Fatalf("a1 -> b1: %d of 200 answered, relayed %v", got, after-before)
	}
	if seen != 0 {
		t.Fatalf("the relays saw %d packets between a1's and b1's pods", seen)
	}
	c := s.at(t)
	for _, relay := range []string{"p", "q"} {
		for _, pair := range [][2]string{{"a1", "b1"}, {"b1", "a1"}} {
			key, _ := wgLeaseData(c, s.h[pair[0]])
			if wp := wgPeers(c, s.h[relay], "flannel-wg")[key]; wp.allowed != s.subnet[pair[0]] {
				t.Fatalf("%s on %s (wg show): allowed IPs %q, want its own subnet %s only", pair[0], relay, wp.allowed, s.subnet[pair[0]])
			}
		}
	}
}

// counterPackets reads the packets of an `nft list counter` output.
func counterPackets(t *testing.T, out string) uint64 {
	t.Helper()
	m := regexp.MustCompile(`packets (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no counter in %q", out)
	}
	n, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSitesRouted: two sites routed to each other, no NAT, --site on their hosts:
// a1 and b1 dial each other directly (as flanneld would), the public hosts relay
// nothing; UDP between them blocked mid-flow, they are relayed within 30 s; the block
// lifted, direct again within 60 s.
func TestSitesRouted(t *testing.T) {
	s := newSiteLab(t, true, routedSpec)
	s.explain(t)
	s.steps(t, []siteStep{
		{"first reply", sitesFirstReply},
		{"every pair", sitesMesh},
		{"direct", sitesRoutedDirect},
		{"blocked, then free", sitesRoutedBlocked},
	})
}

// sitesRoutedDirect: a1 and b1 direct at each other's address; 1,000 pings between
// their pods and nothing relayed.
func sitesRoutedDirect(t *testing.T, s *siteLab) {
	p := s.awaitPath(t, "a1", "b1", isDirect, 20*time.Second)
	if p.Endpoint != s.h["b1"].ip+":51820" {
		t.Fatalf("b1 on a1: direct to %q, want %s:51820", p.Endpoint, s.h["b1"].ip)
	}
	before := s.relayedBy(t)
	got := pingCount(t, s.h["a1"], s.pod["b1"], 1000, true)
	relayed := s.relayedBy(t) - before
	t.Logf("a1 -> b1 direct: %d of 1000 pings answered, %v relayed", got, relayed)
	if got < 990 || relayed > 0 {
		t.Fatalf("a1 -> b1: %d of 1000 answered, %v datagrams relayed", got, relayed)
	}
}

// sitesRoutedBlocked: UDP between a1 and b1 dropped on the way: pings between their
// pods pass again within 30 s, through a relay (GET /peers says so, and why); the
// drop lifted, direct again within 60 s.
func sitesRoutedBlocked(t *testing.T, s *siteLab) {
	ctx := context.Background()
	a1, b1 := netip.MustParseAddr(s.h["a1"].ip), netip.MustParseAddr(s.h["b1"].ip)
	unblock, err := s.lab.BlockUDP(ctx, a1, b1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unblock(context.Background()) })
	blocked := time.Now()
	for _, pair := range [][2]string{{"a1", "b1"}, {"b1", "a1"}} {
		if _, err := awaitPing(s.h[pair[0]].pod, s.pod[pair[1]], 30*time.Second-time.Since(blocked)); err != nil {
			t.Fatalf("blocked %v ago: %v", time.Since(blocked).Round(time.Millisecond), err)
		}
	}
	p := s.awaitPath(t, "a1", "b1", isRelayed, 30*time.Second-time.Since(blocked))
	t.Logf("blocked: a1 <-> b1 answer again %v after the block: %s (%s)", time.Since(blocked).Round(time.Millisecond), p.Path, p.PathDetail)
	if !strings.Contains(p.PathDetail, "direct") {
		t.Fatalf("b1 on a1: pathDetail %q does not say the direct way failed", p.PathDetail)
	}
	if err := unblock(ctx); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	p = s.awaitPath(t, "a1", "b1", isDirect, 60*time.Second)
	t.Logf("freed: a1 <-> b1 direct again %v after: %s", time.Since(freed).Round(time.Millisecond), p.PathDetail)
	if got := pingCount(t, s.h["a1"], s.pod["b1"], 50, false); got < 45 {
		t.Fatalf("a1 -> b1 direct again: %d of 50 answered", got)
	}
}

// TestSitesRoutedAlone: two routed sites and no public host at all: a1 and b1 meet
// directly (before, with no host both could dial, they never met).
func TestSitesRoutedAlone(t *testing.T) {
	s := newSiteLab(t, true, routedAloneSpec)
	s.explain(t)
	sitesMesh(t, s)
	p := s.awaitPath(t, "a1", "b1", isDirect, 20*time.Second)
	if p.Endpoint != s.h["b1"].ip+":51820" {
		t.Fatalf("b1 on a1: direct to %q, want %s:51820", p.Endpoint, s.h["b1"].ip)
	}
}

// sitesRelayTCP: a TCP stream between a1's and b1's pods passes the relay. a1's route
// to b1's subnet leaves room for the relay frame (the device's MTU less
// relay.MaxOverhead), and 20 MB of full-size segments arrive within iperf3's
// generous 60 s (with the frame left to IP fragmentation, a relayed stream moved about
// 1 Mbit/s: 20 MB took minutes).
func sitesRelayTCP(t *testing.T, s *siteLab) {
	testenv.NeedTools(t, "iperf3")
	a1 := s.h["a1"]
	var dev int
	if _, err := fmt.Sscanf(fieldAfter(s.sh(a1.ns, "ip -o link show flannel-wg"), "mtu"), "%d", &dev); err != nil {
		t.Fatalf("flannel-wg's MTU on a1: %v", err)
	}
	want := strconv.Itoa(dev - relay.MaxOverhead)
	if got := fieldAfter(s.sh(a1.ns, "ip -4 route show "+s.subnet["b1"]+" dev flannel-wg"), "mtu"); got != want {
		t.Fatalf("a1's route to b1's subnet %s (relayed): mtu %q, want %s (flannel-wg's %d less the relay frame)", s.subnet["b1"], got, want, dev)
	}
	s.tcpThrough(t, "a1", "b1", "the relay")
}

// tcpThrough moves 20 MB of TCP (iperf3) from host from's pod to host to's within
// 60 s, on the way named what, and logs how fast.
func (s *siteLab) tcpThrough(t *testing.T, from, to, what string) {
	t.Helper()
	testenv.NeedTools(t, "iperf3")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := s.h[to].pod.Command(ctx, "iperf3", "-s", "-1", "-p", "5299")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	start := time.Now()
	var out []byte
	eventually(t, 10*time.Second, func() error { // the server's first second
		var err error
		if out, err = s.h[from].pod.Command(ctx, "iperf3", "-c", s.pod[to], "-p", "5299", "-n", "20M").CombinedOutput(); err != nil {
			return fmt.Errorf("iperf3 %s -> %s %s: %v: %s", from, to, what, err, out)
		}
		return nil
	})
	t.Logf("20 MB of TCP %s -> %s %s in %v: %s", from, to, what, time.Since(start).Round(time.Millisecond), lastLine(string(out), "receiver"))
}

// fieldAfter is the word after word in s ("" when none).
func fieldAfter(s, word string) string {
	f := strings.Fields(s)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == word {
			return f[i+1]
		}
	}
	return ""
}

// lastLine is the last line of s that holds word.
func lastLine(s, word string) string {
	var last string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			last = strings.TrimSpace(l)
		}
	}
	return last
}
