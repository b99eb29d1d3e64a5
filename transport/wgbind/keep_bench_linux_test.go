package wgbind

import (
	"net/netip"
	"testing"
)

// BenchmarkKeep is the device's handshake initiations to 5,000 peers that never
// answer, in turn, as at the start of a 5,000-peer cluster: one op is one kept
// initiation, the table full of recent ones.
func BenchmarkKeep(b *testing.B) {
	var in initiations
	p := make([]byte, initiationLen)
	p[0] = msgInitiation
	const peers = 5000
	eps := make([]netip.AddrPort, peers)
	for i := range eps {
		eps[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100 + byte(i>>8), byte(i)}), 51820)
	}
	bufs := [][]byte{p}
	for i := 0; b.Loop(); i++ {
		in.keep(bufs, eps[i%peers])
	}
}
