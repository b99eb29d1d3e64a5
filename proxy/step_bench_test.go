package proxy

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/tun/offload/offloadtest"
)

func BenchmarkLookup(b *testing.B) {
	tb, _ := NewTable(netip.MustParsePrefix("198.18.0.0/16"), 24)
	var routes []Route
	for i := range 256 {
		routes = append(routes, Route{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i), 0}), 24),
			netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})})
	}
	if err := tb.Apply(routes, nil); err != nil {
		b.Fatal(err)
	}
	dst := ip4("198.18.0.1")
	b.ReportAllocs()
	var hits int
	for i := range b.N {
		if tb.Load().Lookup(dst+uint32(i&0xff)<<8) != nil {
			hits++
		}
	}
	if hits != b.N {
		b.Fatal("lookup missed")
	}
}

// BenchmarkEgressStep is the per-packet work between the TUN read and sendmmsg:
// snapshot, checks, lookup, TTL decrement.
func BenchmarkEgressStep(b *testing.B) {
	s := testSnapshot(b)
	tb := &Table{}
	tb.snap.Store(s)
	pkt := ipv4Packet(tLocalIP, tPeerPod, 64, layers.IPProtocolTCP, make([]byte, 1400))
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for range b.N {
		pkt[8] = 64
		if _, r := tb.Load().RouteEgress(pkt); r != DropNone {
			b.Fatal(r)
		}
	}
}

// BenchmarkIngressStep is the per-packet work between recvmmsg and the TUN write:
// snapshot, checks (header checksum included), TTL decrement.
func BenchmarkIngressStep(b *testing.B) {
	s := testSnapshot(b)
	tb := &Table{}
	tb.snap.Store(s)
	pkt := ipv4Packet(tPeerPod, tLocalIP, 64, layers.IPProtocolTCP, make([]byte, 1400))
	src := ipconv.U32(tPeerIP)
	var hdr [20]byte
	copy(hdr[:], pkt)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for range b.N {
		copy(pkt, hdr[:]) // TTL and checksum back
		if r := tb.Load().CheckIngress(pkt, src); r != DropNone {
			b.Fatal(r)
		}
		decTTL(pkt)
	}
}

// BenchmarkEgressBatch runs a worker's egress batch of 64 packets to a subnet without
// lease (no socket needed): checks, counters and the rate-limited ICMP path.
func BenchmarkEgressBatchNoRoute(b *testing.B) {
	tb, _ := NewTable(tNetwork, 24)
	_ = tb.SetLocal(tLocal)
	var cnt counters
	w := newWorker(&fakeTUN{}, tb, 64, 1500, 1500, false, &cnt, nopLogger())
	w.tun = discardTUN{}
	pkt := ipv4Packet(tLocalIP, netip.MustParseAddr("198.18.9.1"), 64, layers.IPProtocolUDP, make([]byte, 100))
	for i := range 64 {
		w.tx.sizes[i] = copy(w.tx.bufs[i][Headroom:], pkt)
	}
	b.ReportAllocs()
	for range b.N {
		w.egressBatch(64)
	}
}

type discardTUN struct{}

func (discardTUN) Read([][]byte, []int, int) (int, error)  { return 0, nil }
func (discardTUN) Write(bufs [][]byte, _ int) (int, error) { return len(bufs), nil }

// BenchmarkIngressCoalesce is a worker's ingress batch with TUN offloads: 64 TCP
// segments of 1400 bytes checked, coalesced and written (to a discarding TUN).
func BenchmarkIngressCoalesce(b *testing.B) {
	tb := &Table{}
	tb.snap.Store(testSnapshot(b))
	var cnt counters
	w := newWorker(&vnetDiscard{}, tb, 64, 1500, 1500, false, &cnt, nopLogger())
	var hdrs [64][20]byte
	for i := range 64 {
		p := offloadtest.TCP(tPeerPod, tLocalIP, uint32(i*1400), "", make([]byte, 1400))
		w.rx.sizes[i] = copy(w.rx.bufs[i][Headroom:], p)
		w.rx.src[i] = ipconv.U32(tPeerIP)
		copy(hdrs[i][:], p)
	}
	b.SetBytes(64 * 1452)
	b.ReportAllocs()
	for range b.N {
		for i := range 64 {
			copy(w.rx.bufs[i][Headroom:], hdrs[i][:])
		}
		w.ingressProcess(64)
	}
}
