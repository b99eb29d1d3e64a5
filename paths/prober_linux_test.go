package paths

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/encap"
)

// fixedPaths lists one path and records the route MTUs set on it.
type fixedPaths struct {
	path encap.Path
	mu   sync.Mutex
	mtus []int
}

func (f *fixedPaths) Paths() []encap.Path { return []encap.Path{f.path} }

func (f *fixedPaths) SetRouteMTU(_ netip.Prefix, mtu int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mtus = append(f.mtus, mtu)
	return nil
}

func (f *fixedPaths) lastMTU() (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.mtus) == 0 {
		return 0, false
	}
	return f.mtus[len(f.mtus)-1], true
}

// TestProberInNamespaces probes a peer in a real namespace: host a (192.0.2.1, overlay
// 198.18.1.0) and host b (192.0.2.2, overlay 198.18.2.0 on lo), routed to each other's
// overlay over a veth pair, as a tunnel would carry them. It blocks the overlay
// (encap-blocked), then makes an MTU hole: b's end of the veth takes 1400 bytes, a's
// sends 1500, and a veth drops what its peer's MTU cannot take, silently (path-mtu).
func TestProberInNamespaces(t *testing.T) {
	a, b := netnstest.New(t, "wp-a"), netnstest.New(t, "wp-b")
	testenv.NeedTools(t, "nft")
	if err := netns.Veth(a, "eth0", b, "eth0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := func(ns *netns.NS, args ...string) {
		t.Helper()
		if out, err := ns.Run(ctx, args[0], args[1:]...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	run(a, "ip", "addr", "add", "192.0.2.1/24", "dev", "eth0")
	run(b, "ip", "addr", "add", "192.0.2.2/24", "dev", "eth0")
	run(a, "ip", "addr", "add", "198.18.1.0/32", "dev", "lo")
	run(b, "ip", "addr", "add", "198.18.2.0/32", "dev", "lo")
	run(a, "ip", "route", "add", "198.18.2.0/24", "via", "192.0.2.2")
	run(b, "ip", "route", "add", "198.18.1.0/24", "via", "192.0.2.1")

	src := &fixedPaths{path: encap.Path{Backend: "test", Subnet: netip.MustParsePrefix("198.18.2.0/24"),
		PublicIP: netip.MustParseAddr("192.0.2.2"), Overlay: netip.MustParseAddr("198.18.2.0"),
		Local: netip.MustParseAddr("198.18.1.0"), Endpoint: netip.MustParseAddrPort("192.0.2.2:8472"),
		Proto: "UDP 8472", MTU: 1500}}
	pr := New(Config{Interval: 200 * time.Millisecond, Timeout: 150 * time.Millisecond}, src, zaptest.NewLogger(t))
	done := make(chan error, 1)
	go func() { done <- a.Do(func() error { return pr.Run(ctx) }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("prober: %v", err)
		}
	}()
	await := func(what string, ok func(Peer) bool) Peer {
		t.Helper()
		var last Peer
		testenv.Eventually(t, 10*time.Second, func() error {
			r := pr.Report()
			if len(r.Peers) != 1 {
				return fmt.Errorf("%d peers", len(r.Peers))
			}
			if last = r.Peers[0]; !ok(last) {
				return fmt.Errorf("want %s, have %+v", what, last)
			}
			return nil
		})
		return last
	}
	p := await("up", func(p Peer) bool { return p.State == StateUp && p.PathMTU == 1500 })
	if p.RTTMicros <= 0 || p.Reason != "" {
		t.Fatalf("up: %+v", p)
	}

	// The overlay is blocked, the host still answers.
	run(b, "nft", "add table ip t; add chain ip t in { type filter hook input priority 0; }; add rule ip t in ip daddr 198.18.2.0 drop")
	p = await("down encap-blocked", func(p Peer) bool { return p.State == StateDown })
	if p.Reason != ReasonEncap || !strings.Contains(p.Detail, "UDP 8472") {
		t.Fatalf("blocked: %+v", p)
	}
	run(b, "nft", "delete table ip t")
	await("up again", func(p Peer) bool { return p.State == StateUp })

	// An MTU hole: small probes pass, 1500-byte ones vanish.
	run(b, "ip", "link", "set", "eth0", "mtu", "1400")
	p = await("degraded path-mtu", func(p Peer) bool { return p.State == StateDegraded })
	// A veth takes 4 bytes over its MTU (room for a VLAN tag): 1404 pass.
	if p.Reason != ReasonPathMTU || p.PathMTU != 1404 || p.RouteMTU != 1404 {
		t.Fatalf("hole: %+v", p)
	}
	if mtu, _ := src.lastMTU(); mtu != 1404 {
		t.Fatalf("route MTU set %v, want 1404", src.mtus)
	}
	run(b, "ip", "link", "set", "eth0", "mtu", "1500")
	await("up with the device MTU", func(p Peer) bool { return p.State == StateUp && p.PathMTU == 1500 && p.RouteMTU == 0 })
	if mtu, _ := src.lastMTU(); mtu != 0 {
		t.Fatalf("route MTU set %v, want 0 last", src.mtus)
	}

	// The underlay gone: underlay-unreachable.
	run(b, "ip", "link", "set", "eth0", "down")
	p = await("down underlay-unreachable", func(p Peer) bool { return p.State == StateDown })
	if p.Reason != ReasonUnderlay {
		t.Fatalf("underlay: %+v", p)
	}
}
