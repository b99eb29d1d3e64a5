package proxy

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/tun/offload"
)

var (
	tNetwork = netip.MustParsePrefix("198.18.0.0/16")
	tLocal   = netip.MustParsePrefix("198.18.1.0/24")
	tPeer    = netip.MustParsePrefix("198.18.2.0/24")
	tPeerIP  = netip.MustParseAddr("192.0.2.2")
	tLocalIP = netip.MustParseAddr("198.18.1.5")
	tPeerPod = netip.MustParseAddr("198.18.2.5")
)

func testSnapshot(t testing.TB) *Snapshot {
	tb, err := NewTable(tNetwork, 24)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.SetLocal(tLocal); err != nil {
		t.Fatal(err)
	}
	if err := tb.Apply([]Route{{tPeer, tPeerIP}}, nil); err != nil {
		t.Fatal(err)
	}
	return tb.Load()
}

// reserialize returns pkt's IPv4 header as gopacket computes it, with TTL ttl.
func reserialize(t *testing.T, pkt []byte, ttl uint8) []byte {
	t.Helper()
	var ip layers.IPv4
	if err := ip.DecodeFromBytes(pkt, gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	ip.TTL = ttl
	buf := gopacket.NewSerializeBuffer()
	if err := ip.SerializeTo(buf, gopacket.SerializeOptions{ComputeChecksums: true}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()[:ip.IHL*4]
}

func TestDecTTLMatchesGopacket(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := [][]byte{
		ipv4Packet(tLocalIP, tPeerPod, 64, layers.IPProtocolTCP, []byte("x")),
		ipv4Packet(tLocalIP, tPeerPod, 2, layers.IPProtocolUDP, nil),
		ipv4Packet(tLocalIP, tPeerPod, 255, layers.IPProtocolICMPv4, make([]byte, 100)),
	}
	for range 5000 {
		var a, b [4]byte
		binary.BigEndian.PutUint32(a[:], rng.Uint32())
		binary.BigEndian.PutUint32(b[:], rng.Uint32())
		p := ipv4Packet(netip.AddrFrom4(a), netip.AddrFrom4(b), uint8(2+rng.IntN(254)),
			layers.IPProtocol(rng.IntN(256)), make([]byte, rng.IntN(64)))
		binary.BigEndian.PutUint16(p[4:6], uint16(rng.Uint32())) // id
		binary.BigEndian.PutUint16(p[10:12], 0)
		binary.BigEndian.PutUint16(p[10:12], offload.Checksum(p[:20]))
		cases = append(cases, p)
	}
	for _, p := range cases {
		want := reserialize(t, p, p[8]-1)
		got := append([]byte(nil), p...)
		decTTL(got)
		if !bytes.Equal(got[:20], want) {
			t.Fatalf("decTTL(% x)\n got % x\nwant % x", p[:20], got[:20], want)
		}
		if offload.Checksum(got[:20]) != 0 {
			t.Fatalf("checksum does not verify: % x", got[:20])
		}
	}
}

func TestRouteEgress(t *testing.T) {
	s := testSnapshot(t)
	good := ipv4Packet(tLocalIP, tPeerPod, 64, layers.IPProtocolTCP, []byte("hi"))
	v6 := append([]byte(nil), good...)
	v6[0] = 0x60
	ihl4 := append([]byte(nil), good...)
	ihl4[0] = 0x44
	ihlLong := append([]byte(nil), good...)
	ihlLong[0] = 0x4f
	for _, c := range []struct {
		name string
		pkt  []byte
		want DropReason
	}{
		{"ok", good, DropNone},
		{"short", good[:19], DropMalformed},
		{"ipv6", v6, DropMalformed},
		{"ihl 4", ihl4, DropMalformed},
		{"ihl past end", ihlLong, DropMalformed},
		{"ttl 1", ipv4Packet(tLocalIP, tPeerPod, 1, layers.IPProtocolTCP, nil), DropTTL},
		{"ttl 0", ipv4Packet(tLocalIP, tPeerPod, 0, layers.IPProtocolTCP, nil), DropTTL},
		{"no lease", ipv4Packet(tLocalIP, netip.MustParseAddr("198.18.9.1"), 64, layers.IPProtocolTCP, nil), DropNoRoute},
		{"own subnet", ipv4Packet(tLocalIP, netip.MustParseAddr("198.18.1.9"), 64, layers.IPProtocolTCP, nil), DropNotOverlay},
		{"outside network", ipv4Packet(tLocalIP, netip.MustParseAddr("192.0.2.77"), 64, layers.IPProtocolTCP, nil), DropNotOverlay},
	} {
		t.Run(c.name, func(t *testing.T) {
			pkt := append([]byte(nil), c.pkt...)
			p, r := s.RouteEgress(pkt)
			if r != c.want {
				t.Fatalf("RouteEgress = %v, want %v", r, c.want)
			}
			if r != DropNone {
				if p != nil || !bytes.Equal(pkt, c.pkt) {
					t.Fatal("dropped packet routed or changed")
				}
				return
			}
			if p == nil || p.PublicIP != tPeerIP || pkt[8] != c.pkt[8]-1 || offload.Checksum(pkt[:20]) != 0 {
				t.Fatalf("routed to %v, ttl %d, header % x", p, pkt[8], pkt[:20])
			}
		})
	}
}

func TestCheckIngress(t *testing.T) {
	s := testSnapshot(t)
	peer, stranger := ipconv.U32(tPeerIP), ip4("192.0.2.99")
	good := ipv4Packet(tPeerPod, tLocalIP, 64, layers.IPProtocolUDP, make([]byte, 30))
	withOpts := ipv4Packet(tPeerPod, tLocalIP, 64, layers.IPProtocolUDP, make([]byte, 30))
	withOpts[0] = 0x46 // a 24-byte header: still consistent with the total length
	binary.BigEndian.PutUint16(withOpts[10:], 0)
	binary.BigEndian.PutUint16(withOpts[10:], offload.Checksum(withOpts[:24]))
	long := append(append([]byte(nil), good...), 0)
	v6 := append([]byte(nil), good...)
	v6[0] = 0x65
	badSum := append([]byte(nil), good...)
	badSum[11] ^= 1
	frag := append([]byte(nil), good...)
	frag[6] = 0x20 // more fragments
	binary.BigEndian.PutUint16(frag[10:], 0)
	binary.BigEndian.PutUint16(frag[10:], offload.Checksum(frag[:20]))
	for _, c := range []struct {
		name string
		pkt  []byte
		src  uint32
		want DropReason
	}{
		{"ok", good, peer, DropNone},
		{"ok with options", withOpts, peer, DropNone},
		{"flannel0 address", ipv4Packet(tPeer.Addr(), tLocal.Addr(), 64, layers.IPProtocolICMPv4, make([]byte, 8)), peer, DropNone},
		{"unknown source", good, stranger, DropUnknownSource},
		{"unknown source, garbage", []byte{1, 2, 3}, stranger, DropUnknownSource},
		{"short", good[:19], peer, DropTruncated},
		{"empty", nil, peer, DropTruncated},
		{"not ipv4", v6, peer, DropMalformed},
		{"ihl 4", withIHL(good, 4), peer, DropBadHeaderLen},
		{"ihl past total length", withIHL(good, 15), peer, DropBadHeaderLen},
		{"trailing bytes", long, peer, DropBadLength},
		{"truncated", good[:len(good)-1], peer, DropTruncated},
		{"truncated inside options", withOpts[:22], peer, DropTruncated},
		{"bad header checksum", badSum, peer, DropBadChecksum},
		{"fragment", frag, peer, DropNone},
		{"multicast", ipv4Packet(tPeerPod, netip.MustParseAddr("224.0.0.1"), 64, layers.IPProtocolUDP, nil), peer, DropNotUnicast},
		{"limited broadcast", ipv4Packet(tPeerPod, netip.MustParseAddr("255.255.255.255"), 64, layers.IPProtocolUDP, nil), peer, DropNotUnicast},
		{"our subnet's broadcast", ipv4Packet(tPeerPod, netip.MustParseAddr("198.18.1.255"), 64, layers.IPProtocolUDP, nil), peer, DropNotUnicast},
		{"broadcast source", ipv4Packet(netip.MustParseAddr("198.18.2.255"), tLocalIP, 64, layers.IPProtocolUDP, nil), peer, DropNotUnicast},
		{"multicast from a stranger", ipv4Packet(tPeerPod, netip.MustParseAddr("224.0.0.1"), 64, layers.IPProtocolUDP, nil), stranger, DropUnknownSource},
		{"ttl 0", ipv4Packet(tPeerPod, tLocalIP, 0, layers.IPProtocolUDP, nil), peer, DropTTL},
		{"spoofed source", ipv4Packet(netip.MustParseAddr("198.18.3.4"), tLocalIP, 64, layers.IPProtocolUDP, nil), peer, DropSpoofedSource},
		{"source outside network", ipv4Packet(netip.MustParseAddr("203.0.113.1"), tLocalIP, 64, layers.IPProtocolUDP, nil), peer, DropSpoofedSource},
		{"not for us", ipv4Packet(tPeerPod, netip.MustParseAddr("198.18.4.4"), 64, layers.IPProtocolUDP, nil), peer, DropNotLocal},
		{"ttl 1", ipv4Packet(tPeerPod, tLocalIP, 1, layers.IPProtocolUDP, nil), peer, DropTTL},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := s.CheckIngress(c.pkt, c.src); got != c.want {
				t.Fatalf("CheckIngress = %v, want %v", got, c.want)
			}
		})
	}
}

func TestWantsICMPError(t *testing.T) {
	echo := icmpEcho(tLocalIP, tPeerPod, 64)
	unreach := append([]byte(nil), echo...)
	unreach[20] = 3
	frag := ipv4Packet(tLocalIP, tPeerPod, 64, layers.IPProtocolUDP, make([]byte, 8))
	frag[7] = 1 // offset 8 bytes
	for _, c := range []struct {
		name string
		pkt  []byte
		want bool
	}{
		{"udp", ipv4Packet(tLocalIP, tPeerPod, 64, layers.IPProtocolUDP, make([]byte, 8)), true},
		{"echo", echo, true},
		{"icmp error", unreach, false},
		{"later fragment", frag, false},
		{"from 0.0.0.0", ipv4Packet(netip.IPv4Unspecified(), tPeerPod, 64, layers.IPProtocolUDP, nil), false},
		{"from multicast", ipv4Packet(netip.MustParseAddr("224.0.0.1"), tPeerPod, 64, layers.IPProtocolUDP, nil), false},
	} {
		if got := wantsICMPError(c.pkt); got != c.want {
			t.Errorf("%s: wantsICMPError = %v, want %v", c.name, got, c.want)
		}
	}
}

// fakeTUN records what the worker writes back into the device.
type fakeTUN struct{ written [][]byte }

func (f *fakeTUN) Read([][]byte, []int, int) (int, error) { return 0, nil }
func (f *fakeTUN) Write(bufs [][]byte, off int) (int, error) {
	for _, b := range bufs {
		f.written = append(f.written, append([]byte(nil), b[off:]...))
	}
	return len(bufs), nil
}

// TestEgressNetUnreachable sends packets to a subnet without a lease through the
// worker's egress step and decodes the ICMP replies with gopacket.
func TestEgressNetUnreachable(t *testing.T) {
	tb, _ := NewTable(tNetwork, 24)
	_ = tb.SetLocal(tLocal)
	ft := &fakeTUN{}
	var cnt counters
	w := newWorker(ft, tb, 4, 1500, 1500, false, &cnt, nopLogger())
	dst := netip.MustParseAddr("198.18.9.1")
	orig := icmpEcho(tLocalIP, dst, 64)
	for range 5 { // 20 packets: the burst of 10 passes, the rest are limited
		for i := range 4 {
			w.tx.sizes[i] = copy(w.tx.bufs[i][Headroom:], orig)
		}
		w.egressBatch(4)
	}
	if got := cnt.drops[DropNoRoute].Load(); got != 20 {
		t.Fatalf("no_route drops = %d, want 20", got)
	}
	if len(ft.written) != 10 || cnt.icmpSent.Load() != 10 {
		t.Fatalf("%d ICMP replies (%d counted), want the burst of 10", len(ft.written), cnt.icmpSent.Load())
	}
	pkt := gopacket.NewPacket(ft.written[0], layers.LayerTypeIPv4, gopacket.Default)
	ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	ic, _ := pkt.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
	if ip == nil || ic == nil {
		t.Fatalf("not IPv4+ICMP: %v", pkt)
	}
	if ic.TypeCode != layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodeNet) {
		t.Fatalf("type/code %v", ic.TypeCode)
	}
	if !ip.DstIP.Equal(tLocalIP.AsSlice()) || !ip.SrcIP.Equal(netip.MustParseAddr("198.18.9.0").AsSlice()) {
		t.Fatalf("ICMP %v -> %v", ip.SrcIP, ip.DstIP)
	}
	if int(ip.Length) != len(ft.written[0]) || offload.Checksum(ft.written[0][:20]) != 0 || offload.Checksum(ft.written[0][20:]) != 0 {
		t.Fatalf("bad length or checksums: % x", ft.written[0])
	}
	if !bytes.Equal(ic.Payload, orig[:28]) {
		t.Fatalf("quote % x, want % x", ic.Payload, orig[:28])
	}
}

// withIHL returns a copy of pkt with header length field ihl and a valid checksum.
func withIHL(pkt []byte, ihl byte) []byte {
	p := append([]byte(nil), pkt...)
	p[0] = 0x40 | ihl
	binary.BigEndian.PutUint16(p[10:], 0)
	binary.BigEndian.PutUint16(p[10:], offload.Checksum(p[:20]))
	return p
}

// TestIngressOversized: a datagram beyond the largest packet a peer may send, whether
// cut by the receive buffer (MSG_TRUNC reports its whole size) or inside a UDP GRO
// message, is dropped as oversized (as unknown_source from a stranger); one that fits
// passes.
func TestIngressOversized(t *testing.T) {
	tb := &Table{}
	tb.snap.Store(testSnapshot(t))
	for _, vnet := range []bool{false, true} {
		var tun TUN = &fakeTUN{}
		if vnet {
			tun = &vnetTUN{}
		}
		var cnt counters
		w := newWorker(tun, tb, 4, 1500, 2000, true, &cnt, nopLogger())
		fits := ipv4Packet(tPeerPod, tLocalIP, 64, layers.IPProtocolUDP, make([]byte, 2000-20))
		big := ipv4Packet(tPeerPod, tLocalIP, 64, layers.IPProtocolUDP, make([]byte, 2001-20))
		w.rx.sizes[0], w.rx.src[0] = copy(w.rx.bufs[0][Headroom:], fits), ipconv.U32(tPeerIP)
		w.rx.sizes[1], w.rx.src[1] = len(w.rx.bufs[1])-Headroom+1, ipconv.U32(tPeerIP) // cut by the buffer
		// A GRO buffer holds it whole; a plain one gets it cut, with its real size.
		copy(w.rx.bufs[2][Headroom:], big)
		w.rx.sizes[2], w.rx.src[2] = len(big), ipconv.U32(tPeerIP)
		w.rx.sizes[3], w.rx.src[3] = len(w.rx.bufs[3])-Headroom+100, ip4("192.0.2.99")
		w.ingressProcess(4)
		if cnt.rxPackets.Load() != 1 || cnt.drops[DropOversized].Load() != 2 || cnt.drops[DropUnknownSource].Load() != 1 {
			t.Fatalf("vnet %v: rx %d, oversized %d, unknown source %d; want 1, 2, 1", vnet,
				cnt.rxPackets.Load(), cnt.drops[DropOversized].Load(), cnt.drops[DropUnknownSource].Load())
		}
	}
}
