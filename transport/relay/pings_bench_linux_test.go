package relay

import (
	"crypto/rand"
	"fmt"
	"net/netip"
	"testing"

	"github.com/weftnet/weft/bench/netnstest"
)

// BenchmarkPings is a chooser's tick of pings, 1,000 relayed peers each pinged
// through 8 relays (8,000 pings, the relays' turns interleaved as the chooser's),
// sent one system call each (Ping, "each") and in batches (Pings, "batch"), in one
// run. The node is in a namespace of its own whose sends leave on a veth to a
// neighbour nobody is (a GSO message crosses the veth whole; a NIC, or the kernel
// before it, splits it into datagrams). ns/ping is the time per ping.
func BenchmarkPings(b *testing.B) {
	a := netnstest.Sink(b, "wpb", "198.51.100.0/22")
	var n *Node
	if err := a.Do(func() error {
		var priv [32]byte
		_, _ = rand.Read(priv[:])
		var err error
		n, err = Listen(Config{Private: priv, WGPort: 51820})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = n.Close() })
	const peers, relays = 1000, 8
	var ps []PingTo
	for i := range peers {
		for j := range relays {
			ps = append(ps, PingTo{Peer: Key{byte(i), byte(i >> 8), 1},
				Via: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(j + 1)}), DefaultPort)})
		}
	}
	for _, batch := range []bool{false, true} {
		name := "each"
		if batch {
			name = "batch"
		}
		b.Run(fmt.Sprintf("%s/%d", name, len(ps)), func(b *testing.B) {
			work := make([]PingTo, len(ps))
			for b.Loop() {
				if batch {
					copy(work, ps) // in the chooser's order: Pings sorts it
					if failed, err := n.Pings(work); failed > 0 {
						b.Fatalf("%d failed: %v", failed, err)
					}
					continue
				}
				for _, p := range ps {
					if err := n.Ping(p.Peer, p.Via, p.Addr); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(ps)), "ns/ping")
		})
	}
}
