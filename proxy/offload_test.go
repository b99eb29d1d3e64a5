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
)

// tcpPacket builds an IPv4/TCP packet with gopacket (checksums computed).
func tcpPacket(src, dst netip.Addr, seq uint32, flags string, payload []byte) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, Id: 100, Flags: layers.IPv4DontFragment,
		SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 5201, Seq: seq, Ack: 777, Window: 512, DataOffset: 8,
		ACK: true, PSH: bytes.ContainsRune([]byte(flags), 'P'), FIN: bytes.ContainsRune([]byte(flags), 'F'),
		CWR: bytes.ContainsRune([]byte(flags), 'C'),
		Options: []layers.TCPOption{{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindNop},
			{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: []byte{0, 0, 0, 1, 0, 0, 0, 2}}}}
	_ = tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		ip, tcp, gopacket.Payload(payload)); err != nil {
		panic(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// tcpChecksumOK verifies a TCP checksum over the pseudo header.
func tcpChecksumOK(pkt []byte) bool {
	ihl := int(pkt[0]&0x0f) * 4
	ac := sum(pkt[12:20], uint64(protoTCP)+uint64(len(pkt)-ihl))
	return fold(sum(pkt[ihl:], ac)) == 0xffff
}

// refChecksum is the Internet checksum summed 16 bits at a time as RFC 1071 describes
// it: the oracle the 64-bit sum is checked against.
func refChecksum(b []byte) uint16 {
	var ac uint32
	for ; len(b) >= 2; b = b[2:] {
		ac += uint32(b[0])<<8 | uint32(b[1])
	}
	if len(b) == 1 {
		ac += uint32(b[0]) << 8
	}
	for ac > 0xffff {
		ac = (ac & 0xffff) + (ac >> 16)
	}
	return ^uint16(ac)
}

func TestSumMatchesChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := range 300 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if got, want := checksum(b), refChecksum(b); got != want {
			t.Fatalf("len %d: sum %04x, checksum %04x", n, got, want)
		}
	}
	// Every bit set (the most carries), long buffers, and sums chained over pieces
	// of even length as the segment checksums chain them.
	for _, n := range []int{31, 32, 33, 1400, 1401, 9000, 65535} {
		ones := bytes.Repeat([]byte{0xff}, n)
		rnd := make([]byte, n)
		for i := range rnd {
			rnd[i] = byte(rng.Uint32())
		}
		for _, b := range [][]byte{ones, rnd} {
			if got, want := checksum(b), refChecksum(b); got != want {
				t.Fatalf("len %d: sum %04x, checksum %04x", n, got, want)
			}
			cut := (n / 3) &^ 1
			if got, want := ^fold(sum(b[cut:], sum(b[:cut], 0xffffffffffffffff))), refChecksum(b); got != want {
				t.Fatalf("len %d chained at %d: %04x, want %04x", n, cut, got, want)
			}
		}
	}
}

func TestSegmentTSO(t *testing.T) {
	payload := make([]byte, 10000)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	super := tcpPacket(tLocalIP, tPeerPod, 1000, "PFC", payload)
	const gso = 1400
	ihl, hl, ok := tsoLayout(super)
	if !ok || ihl != 20 || hl != 52 {
		t.Fatalf("layout %d %d %v", ihl, hl, ok)
	}
	var got []byte
	h := make([]byte, maxSegHeaders)
	n := 0
	for i, off := 0, 0; off < len(payload); i, off = i+1, off+gso {
		seg := payload[off:min(off+gso, len(payload))]
		last := off+gso >= len(payload)
		segmentHeaders(h[:hl], super, ihl, hl, i, off, seg, last)
		pkt := append(append([]byte(nil), h[:hl]...), seg...)
		p := gopacket.NewPacket(pkt, layers.LayerTypeIPv4, gopacket.Default)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if ip == nil || tcp == nil {
			t.Fatalf("segment %d does not decode: %v", i, p)
		}
		if int(ip.Length) != len(pkt) || ip.Id != uint16(100+i) || checksum(pkt[:20]) != 0 || !tcpChecksumOK(pkt) {
			t.Fatalf("segment %d: length %d id %d, checksums bad", i, ip.Length, ip.Id)
		}
		if tcp.Seq != uint32(1000+off) || tcp.PSH != last || tcp.FIN != last || tcp.CWR != (i == 0) || !tcp.ACK {
			t.Fatalf("segment %d: seq %d flags P%v F%v C%v", i, tcp.Seq, tcp.PSH, tcp.FIN, tcp.CWR)
		}
		got = append(got, tcp.Payload...)
		n++
	}
	if n != 8 || !bytes.Equal(got, payload) {
		t.Fatalf("%d segments, payload intact %v", n, bytes.Equal(got, payload))
	}
}

func TestFinishChecksum(t *testing.T) {
	pkt := tcpPacket(tLocalIP, tPeerPod, 1, "", []byte("partial checksum"))
	want := binary.BigEndian.Uint16(pkt[36:])
	// What the kernel hands over: the pseudo-header sum in the field.
	binary.BigEndian.PutUint16(pkt[36:], fold(sum(pkt[12:20], uint64(protoTCP)+uint64(len(pkt)-20))))
	if !finishChecksum(pkt, vnetHdr{flags: vnetNeedsCsum, csumStart: 20, csumOffset: 16}) {
		t.Fatal("offsets refused")
	}
	if got := binary.BigEndian.Uint16(pkt[36:]); got != want {
		t.Fatalf("checksum %04x, want %04x", got, want)
	}
	if finishChecksum(pkt, vnetHdr{csumStart: uint16(len(pkt)), csumOffset: 16}) {
		t.Fatal("offsets past the end accepted")
	}
}

// vnetTUN is a fakeTUN with offloads.
type vnetTUN struct{ fakeTUN }

func (*vnetTUN) VnetHdr() bool { return true }

func (f *vnetTUN) Write(bufs [][]byte, off int) (int, error) {
	for _, b := range bufs { // keep the virtio-net header too
		f.written = append(f.written, append([]byte(nil), b[off-vnetHdrLen:]...))
	}
	return len(bufs), nil
}

// gatherTUN is a vnetTUN that takes packets in pieces, as tun.Queue's WriteGather.
type gatherTUN struct{ vnetTUN }

func (f *gatherTUN) WriteGather(pkts [][][]byte) (int, error) {
	for _, ps := range pkts {
		f.written = append(f.written, bytes.Join(ps, nil))
	}
	return len(pkts), nil
}

// TestIngressCoalesce runs each case through a queue that gathers pieces (writev, as
// tun.Queue) and one that takes whole packets (the pieces joined by the worker).
func TestIngressCoalesce(t *testing.T) {
	for _, gather := range []bool{true, false} {
		t.Run(map[bool]string{true: "gather", false: "join"}[gather], func(t *testing.T) { testIngressCoalesce(t, gather) })
	}
}

func testIngressCoalesce(t *testing.T, gather bool) {
	seg := func(seq uint32, flags string, n int) []byte {
		return tcpPacket(tPeerPod, tLocalIP, seq, flags, bytes.Repeat([]byte{byte(seq)}, n))
	}
	other := tcpPacket(tPeerPod, netip.MustParseAddr("198.18.1.6"), 5000, "", make([]byte, 100))
	for _, c := range []struct {
		name  string
		pkts  [][]byte
		want  []int // datagrams per TUN write
		gso   []bool
		bytes int
	}{
		{"run", [][]byte{seg(0, "", 1000), seg(1000, "", 1000), seg(2000, "", 1000)}, []int{3}, []bool{true}, 3000},
		{"short last", [][]byte{seg(0, "", 1000), seg(1000, "", 1000), seg(2000, "", 10)}, []int{3}, []bool{true}, 2010},
		{"psh ends run", [][]byte{seg(0, "", 1000), seg(1000, "P", 1000), seg(2000, "", 1000)}, []int{2, 1}, []bool{true, false}, 3000},
		{"gap", [][]byte{seg(0, "", 1000), seg(1500, "", 1000)}, []int{1, 1}, []bool{false, false}, 2000},
		{"longer second", [][]byte{seg(0, "", 500), seg(500, "", 1000)}, []int{1, 1}, []bool{false, false}, 1500},
		{"other flow", [][]byte{seg(0, "", 100), other, seg(100, "", 100)}, []int{1, 1, 1}, []bool{false, false, false}, 200},
		{"fin not coalesced", [][]byte{seg(0, "", 100), seg(100, "F", 100)}, []int{1, 1}, []bool{false, false}, 200},
		{"udp", [][]byte{ipv4Packet(tPeerPod, tLocalIP, 64, layers.IPProtocolUDP, make([]byte, 50))}, []int{1}, []bool{false}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := &Table{}
			tb.snap.Store(testSnapshot(t))
			ft := &vnetTUN{}
			var tun TUN = ft
			if gather {
				g := &gatherTUN{}
				ft, tun = &g.vnetTUN, g
			}
			var cnt counters
			w := newWorker(tun, tb, 8, 1500, 1500, false, &cnt, nopLogger())
			if (w.rx.gather != nil) != gather {
				t.Fatalf("gather writer found: %v", w.rx.gather != nil)
			}
			for i, p := range c.pkts {
				w.rx.sizes[i] = copy(w.rx.bufs[i][Headroom:], p)
				w.rx.src[i] = ipconv.U32(tPeerIP)
			}
			w.ingressProcess(len(c.pkts))
			if len(ft.written) != len(c.want) {
				t.Fatalf("%d writes, want %d", len(ft.written), len(c.want))
			}
			var payload []byte
			for i, b := range ft.written {
				vh := parseVnetHdr(b)
				pkt := b[vnetHdrLen:]
				if (vh.gsoType == vnetGSOTCPv4) != c.gso[i] {
					t.Fatalf("write %d: gso type %d", i, vh.gsoType)
				}
				if checksum(pkt[:20]) != 0 || int(binary.BigEndian.Uint16(pkt[2:])) != len(pkt) || pkt[8] != 63 {
					t.Fatalf("write %d: bad IPv4 header % x", i, pkt[:20])
				}
				if vh.gsoType == vnetGSOTCPv4 {
					if vh.flags != vnetNeedsCsum || vh.csumStart != 20 || vh.csumOffset != 16 || vh.hdrLen != 52 {
						t.Fatalf("write %d: vnet header %+v", i, vh)
					}
					// Finish the partial checksum as the kernel would, then verify.
					if !finishChecksum(pkt, vh) || !tcpChecksumOK(pkt) {
						t.Fatalf("write %d: TCP checksum does not verify", i)
					}
					if int(vh.gsoSize) != len(c.pkts[0])-52 {
						t.Fatalf("gso size %d", vh.gsoSize)
					}
				} else if vh != (vnetHdr{}) {
					t.Fatalf("write %d: single packet with vnet header %+v", i, vh)
				}
				if pkt[9] == protoTCP && pkt[16+3] == 5 {
					payload = append(payload, pkt[52:]...)
				}
			}
			if c.bytes > 0 && len(payload) != c.bytes {
				t.Fatalf("payload %d bytes, want %d", len(payload), c.bytes)
			}
			if cnt.rxPackets.Load() != uint64(len(c.pkts)) || cnt.rxWrites.Load() != uint64(len(c.want)) {
				t.Fatalf("rx packets %d writes %d", cnt.rxPackets.Load(), cnt.rxWrites.Load())
			}
		})
	}
}

// TestIngressNoAlloc: the ingress path (checks, TTL, coalescing, TUN write) does not
// allocate per batch.
func TestIngressNoAlloc(t *testing.T) {
	tb := &Table{}
	tb.snap.Store(testSnapshot(t))
	var cnt counters
	w := newWorker(&vnetDiscard{}, tb, 64, 1500, 1500, false, &cnt, nopLogger())
	for i := range 64 {
		p := tcpPacket(tPeerPod, tLocalIP, uint32(i*1400), "", make([]byte, 1400))
		w.rx.sizes[i] = copy(w.rx.bufs[i][Headroom:], p)
		w.rx.src[i] = ipconv.U32(tPeerIP)
	}
	if a := testing.AllocsPerRun(100, func() {
		for i := range 64 {
			w.rx.bufs[i][Headroom+8] = 64 // TTL back, checksum adjusted below
			binary.BigEndian.PutUint16(w.rx.bufs[i][Headroom+10:], 0)
			binary.BigEndian.PutUint16(w.rx.bufs[i][Headroom+10:], checksum(w.rx.bufs[i][Headroom:Headroom+20]))
		}
		w.ingressProcess(64)
	}); a != 0 {
		t.Fatalf("%v allocations per batch", a)
	}
	if cnt.rxWrites.Load() == 0 || cnt.rxWrites.Load() >= cnt.rxPackets.Load() {
		t.Fatalf("nothing coalesced: %d writes for %d packets", cnt.rxWrites.Load(), cnt.rxPackets.Load())
	}
}

// TestIngressUDPGRO feeds messages that UDP GRO packed with several datagrams: the
// TCP ones coalesce across them, a lone UDP one (no headroom in front) is copied out
// with a clean virtio-net header, and a bad one among them is dropped alone.
func TestIngressUDPGRO(t *testing.T) {
	tb := &Table{}
	tb.snap.Store(testSnapshot(t))
	ft := &vnetTUN{}
	var cnt counters
	w := newWorker(ft, tb, 8, 1500, 1500, true, &cnt, nopLogger())
	if !w.rx.udpGRO || len(w.rx.bufs[0]) < Headroom+maxSuperPacket {
		t.Fatal("receive buffers not sized for UDP GRO")
	}
	seg := func(seq uint32) []byte {
		return tcpPacket(tPeerPod, tLocalIP, seq, "", bytes.Repeat([]byte{byte(seq / 100)}, 100))
	}
	udp := ipv4Packet(tPeerPod, tLocalIP, 64, layers.IPProtocolUDP, make([]byte, 132)) // same size: 152
	bad := append([]byte(nil), udp...)
	bad[16] = 10 // not for us
	binary.BigEndian.PutUint16(bad[10:], 0)
	binary.BigEndian.PutUint16(bad[10:], checksum(bad[:20]))
	msgs := [][][]byte{
		{seg(0), seg(100), seg(200)},
		{seg(300), udp, bad, seg(400)},
	}
	for i, m := range msgs {
		n := 0
		for _, d := range m {
			if len(d) != 152 {
				t.Fatalf("datagram of %d bytes", len(d))
			}
			n += copy(w.rx.bufs[i][Headroom+n:], d)
		}
		w.rx.sizes[i], w.rx.segs[i], w.rx.src[i] = n, 152, ipconv.U32(tPeerIP)
	}
	w.ingressProcess(len(msgs))
	// Writes: run 0-300, the UDP datagram, then 400 alone.
	if len(ft.written) != 3 {
		t.Fatalf("%d writes, want 3", len(ft.written))
	}
	run, lone, last := ft.written[0], ft.written[1], ft.written[2]
	if vh := parseVnetHdr(run); vh.gsoType != vnetGSOTCPv4 || len(run) != vnetHdrLen+52+400 {
		t.Fatalf("run: %+v, %d bytes", vh, len(run))
	}
	if vh := parseVnetHdr(lone); vh != (vnetHdr{}) || !bytes.Equal(lone[vnetHdrLen+20:], udp[20:]) || lone[vnetHdrLen+8] != 63 {
		t.Fatalf("lone UDP datagram: %+v % x", vh, lone[:vnetHdrLen+24])
	}
	if vh := parseVnetHdr(last); vh != (vnetHdr{}) || binary.BigEndian.Uint32(last[vnetHdrLen+24:]) != 400 {
		t.Fatalf("last segment: %+v", vh)
	}
	if cnt.drops[DropNotLocal].Load() != 1 || cnt.rxPackets.Load() != 6 {
		t.Fatalf("drops %d, rx %d", cnt.drops[DropNotLocal].Load(), cnt.rxPackets.Load())
	}
}

type vnetDiscard struct{ discardTUN }

func (*vnetDiscard) WriteGather(pkts [][][]byte) (int, error) { return len(pkts), nil }

func (*vnetDiscard) VnetHdr() bool { return true }

// TestIngressRunLimit: a TCP run ends at groMaxSegs segments (the kernel's GRO limit,
// and what bounds the pieces of one gathered write), the rest starts a new run.
func TestIngressRunLimit(t *testing.T) {
	tb := &Table{}
	tb.snap.Store(testSnapshot(t))
	g := &gatherTUN{}
	var cnt counters
	const n = groMaxSegs + 6
	w := newWorker(g, tb, n, 1500, 1500, false, &cnt, nopLogger())
	for i := range n {
		p := tcpPacket(tPeerPod, tLocalIP, uint32(i*100), "", make([]byte, 100))
		w.rx.sizes[i] = copy(w.rx.bufs[i][Headroom:], p)
		w.rx.src[i] = ipconv.U32(tPeerIP)
	}
	w.ingressProcess(n)
	if len(g.written) != 2 {
		t.Fatalf("%d writes, want 2", len(g.written))
	}
	for i, want := range []int{groMaxSegs, n - groMaxSegs} {
		if got := len(g.written[i]) - vnetHdrLen - 52; got != want*100 {
			t.Errorf("write %d: %d payload bytes, want %d", i, got, want*100)
		}
	}
}
