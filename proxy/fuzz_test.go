package proxy

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"
)

// FuzzIngressCheck feeds arbitrary datagrams to CheckIngress: it must never panic, and
// whatever it accepts must satisfy every check, and survive the TTL decrement.
func FuzzIngressCheck(f *testing.F) {
	s := testSnapshot(f)
	f.Add(ipv4Packet(tPeerPod, tLocalIP, 64, layers.IPProtocolUDP, make([]byte, 30)), be32(tPeerIP))
	f.Add(ipv4Packet(tPeerPod, tLocalIP, 1, layers.IPProtocolUDP, nil), be32(tPeerIP))
	f.Add(icmpEcho(tPeerPod, tLocalIP, 64), be32(tPeerIP))
	f.Add([]byte{0x45}, be32(tPeerIP))
	f.Add(ipv4Packet(tPeerPod, tLocalIP, 64, layers.IPProtocolTCP, nil), be32(netip.MustParseAddr("192.0.2.9")))
	f.Fuzz(func(t *testing.T, pkt []byte, src uint32) {
		r := s.CheckIngress(pkt, src)
		if r >= numDropReasons {
			t.Fatalf("reason %d out of range", r)
		}
		if r != DropNone {
			return
		}
		ihl := int(pkt[0]&0x0f) * 4
		switch {
		case len(pkt) < 20 || pkt[0]>>4 != 4 || ihl < 20 || ihl > len(pkt):
			t.Fatal("accepted a malformed header")
		case int(binary.BigEndian.Uint16(pkt[2:4])) != len(pkt):
			t.Fatal("accepted a length mismatch")
		case !s.HoldsLease(src):
			t.Fatal("accepted a datagram from an address without a lease")
		case !tPeer.Contains(addrOf(binary.BigEndian.Uint32(pkt[12:16]))):
			t.Fatal("accepted a source outside the sender's subnet")
		case !tLocal.Contains(addrOf(binary.BigEndian.Uint32(pkt[16:20]))):
			t.Fatal("accepted a destination outside our subnet")
		case pkt[8] <= 1:
			t.Fatal("accepted a TTL that expires")
		}
		before := checksum(pkt[:ihl])
		decTTL(pkt)
		if after := checksum(pkt[:ihl]); (before == 0) != (after == 0) {
			t.Fatalf("decTTL changed checksum validity: % x", pkt[:ihl])
		}
	})
}
