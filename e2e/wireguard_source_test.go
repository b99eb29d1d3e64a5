package e2e

import (
	"fmt"
	"testing"
)

// TestWireGuardReplySource: a stock peer that reaches weftd's userspace device on a
// second address of its host keeps that address as its endpoint. weftd answers from
// the address it was reached at, as wireguard-go's own Bind and the kernel's device
// do; answering from the route's source (the host's first address) would make the
// peer roam its endpoint there.
func TestWireGuardReplySource(t *testing.T) {
	p := newWGStockPair(t)
	const second = "192.0.2.240" // on a's eth0 beside its own address; /32 so that the route's source stays a.ip
	p.c.sh(p.a.ns, "ip addr add "+second+"/32 dev eth0")
	ep := fmt.Sprintf("%s:%d", second, p.portA)
	wgRun(p.c, p.b, "wg", "set", "flannel-wg", "peer", p.keyA, "endpoint", ep)

	// Traffic both ways: b's pings reach a at the second address, a's answers and
	// its own pings go back; any of them from a.ip would move b's endpoint.
	for range 3 {
		p.c.ping(p.b.pod, p.podA)
		p.c.ping(p.a.pod, p.podB)
	}
	if got := wgPeers(p.c, p.b, "flannel-wg")[p.keyA].endpoint; got != ep {
		t.Fatalf("the stock peer's endpoint for weftd is %s, want %s (weftd answered from another address)", got, ep)
	}
}
