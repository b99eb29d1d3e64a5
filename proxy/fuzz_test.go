package proxy

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/tun/offload"
	"github.com/weftnet/weft/tun/offload/offloadtest"
)

// FuzzIngressCheck feeds arbitrary datagrams to CheckIngress: it must never panic, and
// whatever it accepts must satisfy every check, and survive the TTL decrement.
func FuzzIngressCheck(f *testing.F) {
	s := testSnapshot(f)
	f.Add(ipv4Packet(tPeerPod, tLocalIP, 64, layers.IPProtocolUDP, make([]byte, 30)), ipconv.U32(tPeerIP))
	f.Add(ipv4Packet(tPeerPod, tLocalIP, 1, layers.IPProtocolUDP, nil), ipconv.U32(tPeerIP))
	f.Add(icmpEcho(tPeerPod, tLocalIP, 64), ipconv.U32(tPeerIP))
	f.Add([]byte{0x45}, ipconv.U32(tPeerIP))
	f.Add(ipv4Packet(tPeerPod, tLocalIP, 64, layers.IPProtocolTCP, nil), ipconv.U32(netip.MustParseAddr("192.0.2.9")))
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
		case offload.Checksum(pkt[:ihl]) != 0:
			t.Fatal("accepted a bad header checksum")
		case !s.HoldsLease(src):
			t.Fatal("accepted a datagram from an address without a lease")
		case !tPeer.Contains(addrOf(binary.BigEndian.Uint32(pkt[12:16]))):
			t.Fatal("accepted a source outside the sender's subnet")
		case !tLocal.Contains(addrOf(binary.BigEndian.Uint32(pkt[16:20]))):
			t.Fatal("accepted a destination outside our subnet")
		case pkt[8] <= 1:
			t.Fatal("accepted a TTL that expires")
		case binary.BigEndian.Uint32(pkt[16:20])&0xff == 0xff || binary.BigEndian.Uint32(pkt[12:16])&0xff == 0xff:
			t.Fatal("accepted a subnet broadcast address")
		}
		decTTL(pkt)
		if offload.Checksum(pkt[:ihl]) != 0 {
			t.Fatalf("decTTL broke the checksum: % x", pkt[:ihl])
		}
	})
}

// FuzzIngressCoalesce feeds arbitrary datagrams from a peer through the ingress path
// with TUN offloads (checks, TTL, TCP coalescing, UDP GRO splitting): it must never
// panic, and every packet it writes must carry a consistent IPv4 or IPv6 header and,
// when coalesced (TCP, or UDP with USO), a checksum that verifies once completed.
func FuzzIngressCoalesce(f *testing.F) {
	seg := func(seq uint32, n int) []byte { return offloadtest.TCP(tPeerPod, tLocalIP, seq, "", make([]byte, n)) }
	f.Add(append(append(seg(0, 100), seg(100, 100)...), seg(200, 50)...), uint16(152), uint8(3))
	f.Add(append(seg(0, 100), seg(100, 100)...), uint16(0), uint8(2))
	f.Add(append(seg(0, 100), icmpEcho(tPeerPod, tLocalIP, 64)...), uint16(0), uint8(2))
	dg := func(id uint16, n int) []byte { return offloadtest.UDP(tPeerPod, tLocalIP, 1, id, make([]byte, n)) }
	f.Add(append(append(dg(1, 124), dg(2, 124)...), dg(3, 24)...), uint16(152), uint8(1))
	seg6 := func(seq uint32, n int) []byte { return offloadtest.TCP(t6PeerPod, t6LocalIP, seq, "", make([]byte, n)) }
	f.Add(append(append(seg6(0, 100), seg6(100, 100)...), seg6(200, 50)...), uint16(172), uint8(3))
	dg6 := offloadtest.IPv6(t6PeerPod, t6LocalIP, 64, layers.IPProtocolUDP, []byte{0, 1, 0, 2, 0, 24, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Add(append(append(dg6, dg6...), seg6(0, 30)...), uint16(len(dg6)), uint8(1))
	tb := &Table{}
	tb.snap.Store(testSnapshot6(f))
	f.Fuzz(func(t *testing.T, blob []byte, step uint16, msgs uint8) {
		ft := &vnetUSOTUN{}
		var cnt counters
		w := newWorker(ft, tb, 4, 1500, 1500, true, &cnt, nopLogger())
		n := int(msgs%4) + 1
		// Cut blob into n messages; each is one datagram, or several of size step.
		per := len(blob)/n + 1
		for i := range n {
			part := blob[min(i*per, len(blob)):min((i+1)*per, len(blob))]
			w.rx.sizes[i] = copy(w.rx.bufs[i][Headroom:], part)
			w.rx.segs[i] = int(step)
			w.rx.src[i] = ipconv.U32(tPeerIP)
		}
		w.ingressProcess(n)
		for _, b := range ft.written {
			vh := offload.ParseVnetHdr(b)
			p := b[offload.VnetHdrLen:]
			v6 := len(p) > 0 && p[0]>>4 == 6
			switch {
			case v6 && (len(p) < ipv6HeaderLen || int(binary.BigEndian.Uint16(p[4:])) != len(p)-ipv6HeaderLen):
				t.Fatalf("bad IPv6 packet written: % x", p[:min(len(p), 48)])
			case !v6 && (len(p) < 20 || offload.Checksum(p[:int(p[0]&0x0f)*4]) != 0 || int(binary.BigEndian.Uint16(p[2:])) != len(p)):
				t.Fatalf("bad packet written: % x", p[:min(len(p), 40)])
			}
			if vh.GSOType == offload.GSONone {
				continue
			}
			ok := offloadtest.TCPChecksumOK
			if vh.GSOType == offload.GSOUDPL4 {
				ok = offloadtest.UDPChecksumOK
			}
			if vh.GSOSize == 0 || int(vh.HdrLen) >= len(p) || !offload.FinishChecksum(p, vh) || !ok(p) {
				t.Fatalf("bad coalesced packet: %+v", vh)
			}
		}
	})
}

// FuzzIngressCheck6 feeds arbitrary IPv6 payloads and destinations to the IPv6 side:
// CheckIngress must never panic and what it accepts must satisfy every check;
// RouteEgress and Lookup6 must agree with netip's view of the table.
func FuzzIngressCheck6(f *testing.F) {
	s := testSnapshot6(f)
	src := ipconv.U32(tPeerIP)
	f.Add(offloadtest.IPv6(t6PeerPod, t6LocalIP, 64, layers.IPProtocolUDP, make([]byte, 30)), src)
	f.Add(offloadtest.IPv6(t6PeerPod, t6LocalIP, 1, layers.IPProtocolICMPv6, nil), src)
	f.Add(offloadtest.IPv6(t6Pod3, t6LocalIP, 64, layers.IPProtocolTCP, nil), src)
	f.Add(ipv4Packet(tPeerPod, tLocalIP, 64, layers.IPProtocolUDP, nil), src)
	f.Add([]byte{0x60}, src)
	f.Fuzz(func(t *testing.T, pkt []byte, src uint32) {
		in := append([]byte(nil), pkt...)
		r := s.CheckIngress(pkt, src)
		if r >= numDropReasons {
			t.Fatalf("reason %d out of range", r)
		}
		// The same payload from the IPv6 underlay host (fd00:10:0:3::/64 only).
		if r6 := s.CheckIngressFrom6(pkt, tPeer6IP.As16()); r6 == DropNone {
			if len(pkt) < ipv6HeaderLen || pkt[0]>>4 != 6 || !t6Peer3.Contains(netip.AddrFrom16([16]byte(pkt[8:24]))) ||
				!t6Local.Contains(netip.AddrFrom16([16]byte(pkt[24:40]))) || pkt[7] <= 1 ||
				ipv6HeaderLen+int(binary.BigEndian.Uint16(pkt[4:6])) != len(pkt) {
				t.Fatalf("accepted from the IPv6 underlay: % x", pkt)
			}
		} else if r6 >= numDropReasons {
			t.Fatalf("reason %d out of range", r6)
		}
		if r6 := s.CheckIngressFrom6(pkt, tPeer6IP.Next().As16()); r6 != DropUnknownSource {
			t.Fatalf("from an IPv6 address without a lease: %v", r6)
		}
		if len(pkt) >= ipv6HeaderLen && pkt[0]>>4 == 6 {
			from, _ := netip.AddrFromSlice(pkt[8:24])
			to, _ := netip.AddrFromSlice(pkt[24:40])
			// Egress must route exactly what the table holds.
			p, er := s.RouteEgress(in)
			want := lookup6(s, to)
			if (p != nil) != (want != nil && pkt[7] > 1) || (p == nil && er == DropNone) {
				t.Fatalf("RouteEgress(%v) = %v, %v; Lookup6 %v", to, p, er, want)
			}
			if want != nil && !want.Subnet.Contains(to) {
				t.Fatalf("Lookup6(%v) = %v", to, want.Subnet)
			}
			if r == DropNone {
				switch {
				case !s.HoldsLease(src):
					t.Fatal("accepted a sender without a lease")
				case ipv6HeaderLen+int(binary.BigEndian.Uint16(pkt[4:6])) != len(pkt):
					t.Fatal("accepted a length mismatch")
				case !t6Peer.Contains(from):
					t.Fatal("accepted a source outside the sender's subnet")
				case !t6Local.Contains(to):
					t.Fatal("accepted a destination outside our subnet")
				case pkt[7] <= 1:
					t.Fatal("accepted a hop limit that expires")
				}
			}
		}
	})
}
