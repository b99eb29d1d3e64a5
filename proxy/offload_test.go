package proxy

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/tun/offload"
	"github.com/weftnet/weft/tun/offload/offloadtest"
)

// vnetTUN is a fakeTUN with offloads.
type vnetTUN struct{ fakeTUN }

func (*vnetTUN) VnetHdr() bool { return true }

func (f *vnetTUN) Write(bufs [][]byte, off int) (int, error) {
	for _, b := range bufs { // keep the virtio-net header too
		f.written = append(f.written, append([]byte(nil), b[off-offload.VnetHdrLen:]...))
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
		return offloadtest.TCP(tPeerPod, tLocalIP, seq, flags, bytes.Repeat([]byte{byte(seq)}, n))
	}
	other := offloadtest.TCP(tPeerPod, netip.MustParseAddr("198.18.1.6"), 5000, "", make([]byte, 100))
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
				vh := offload.ParseVnetHdr(b)
				pkt := b[offload.VnetHdrLen:]
				if (vh.GSOType == offload.GSOTCPv4) != c.gso[i] {
					t.Fatalf("write %d: gso type %d", i, vh.GSOType)
				}
				if offload.Checksum(pkt[:20]) != 0 || int(binary.BigEndian.Uint16(pkt[2:])) != len(pkt) || pkt[8] != 63 {
					t.Fatalf("write %d: bad IPv4 header % x", i, pkt[:20])
				}
				if vh.GSOType == offload.GSOTCPv4 {
					if vh.Flags != offload.NeedsCsum || vh.CsumStart != 20 || vh.CsumOffset != 16 || vh.HdrLen != 52 {
						t.Fatalf("write %d: vnet header %+v", i, vh)
					}
					// Finish the partial checksum as the kernel would, then verify.
					if !offload.FinishChecksum(pkt, vh) || !offloadtest.TCPChecksumOK(pkt) {
						t.Fatalf("write %d: TCP checksum does not verify", i)
					}
					if int(vh.GSOSize) != len(c.pkts[0])-52 {
						t.Fatalf("gso size %d", vh.GSOSize)
					}
				} else if vh != (offload.VnetHdr{}) {
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
		p := offloadtest.TCP(tPeerPod, tLocalIP, uint32(i*1400), "", make([]byte, 1400))
		w.rx.sizes[i] = copy(w.rx.bufs[i][Headroom:], p)
		w.rx.src[i] = ipconv.U32(tPeerIP)
	}
	if a := testing.AllocsPerRun(100, func() {
		for i := range 64 {
			w.rx.bufs[i][Headroom+8] = 64 // TTL back, checksum adjusted below
			binary.BigEndian.PutUint16(w.rx.bufs[i][Headroom+10:], 0)
			binary.BigEndian.PutUint16(w.rx.bufs[i][Headroom+10:], offload.Checksum(w.rx.bufs[i][Headroom:Headroom+20]))
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
	if !w.rx.udpGRO || len(w.rx.bufs[0]) < Headroom+offload.MaxSuperPacket {
		t.Fatal("receive buffers not sized for UDP GRO")
	}
	seg := func(seq uint32) []byte {
		return offloadtest.TCP(tPeerPod, tLocalIP, seq, "", bytes.Repeat([]byte{byte(seq / 100)}, 100))
	}
	udp := ipv4Packet(tPeerPod, tLocalIP, 64, layers.IPProtocolUDP, make([]byte, 132)) // same size: 152
	bad := append([]byte(nil), udp...)
	bad[16] = 10 // not for us
	binary.BigEndian.PutUint16(bad[10:], 0)
	binary.BigEndian.PutUint16(bad[10:], offload.Checksum(bad[:20]))
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
	if vh := offload.ParseVnetHdr(run); vh.GSOType != offload.GSOTCPv4 || len(run) != offload.VnetHdrLen+52+400 {
		t.Fatalf("run: %+v, %d bytes", vh, len(run))
	}
	if vh := offload.ParseVnetHdr(lone); vh != (offload.VnetHdr{}) || !bytes.Equal(lone[offload.VnetHdrLen+20:], udp[20:]) || lone[offload.VnetHdrLen+8] != 63 {
		t.Fatalf("lone UDP datagram: %+v % x", vh, lone[:offload.VnetHdrLen+24])
	}
	if vh := offload.ParseVnetHdr(last); vh != (offload.VnetHdr{}) || binary.BigEndian.Uint32(last[offload.VnetHdrLen+24:]) != 400 {
		t.Fatalf("last segment: %+v", vh)
	}
	if cnt.drops[DropNotLocal].Load() != 1 || cnt.rxPackets.Load() != 6 {
		t.Fatalf("drops %d, rx %d", cnt.drops[DropNotLocal].Load(), cnt.rxPackets.Load())
	}
}

type vnetDiscard struct{ discardTUN }

func (*vnetDiscard) WriteGather(pkts [][][]byte) (int, error) { return len(pkts), nil }

func (*vnetDiscard) VnetHdr() bool { return true }

// TestIngressRunLimit: a TCP run ends at offload.MaxRunSegments segments (the kernel's GRO limit,
// and what bounds the pieces of one gathered write), the rest starts a new run.
func TestIngressRunLimit(t *testing.T) {
	tb := &Table{}
	tb.snap.Store(testSnapshot(t))
	g := &gatherTUN{}
	var cnt counters
	const n = offload.MaxRunSegments + 6
	w := newWorker(g, tb, n, 1500, 1500, false, &cnt, nopLogger())
	for i := range n {
		p := offloadtest.TCP(tPeerPod, tLocalIP, uint32(i*100), "", make([]byte, 100))
		w.rx.sizes[i] = copy(w.rx.bufs[i][Headroom:], p)
		w.rx.src[i] = ipconv.U32(tPeerIP)
	}
	w.ingressProcess(n)
	if len(g.written) != 2 {
		t.Fatalf("%d writes, want 2", len(g.written))
	}
	for i, want := range []int{offload.MaxRunSegments, n - offload.MaxRunSegments} {
		if got := len(g.written[i]) - offload.VnetHdrLen - 52; got != want*100 {
			t.Errorf("write %d: %d payload bytes, want %d", i, got, want*100)
		}
	}
}
