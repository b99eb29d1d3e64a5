package offload

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/weftnet/weft/tun/offload/offloadtest"
)

// Addresses of the test packets (documentation ranges: nothing here routes them).
var (
	local, peer   = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.2")
	local6, peer6 = netip.MustParseAddr("2001:db8:1::1"), netip.MustParseAddr("2001:db8:2::2")
)

func TestSumMatchesChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := range 300 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if got, want := Checksum(b), offloadtest.Checksum(b); got != want {
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
			if got, want := Checksum(b), offloadtest.Checksum(b); got != want {
				t.Fatalf("len %d: sum %04x, checksum %04x", n, got, want)
			}
			cut := (n / 3) &^ 1
			if got, want := ^Fold(Sum(b[cut:], Sum(b[:cut], 0xffffffffffffffff))), offloadtest.Checksum(b); got != want {
				t.Fatalf("len %d chained at %d: %04x, want %04x", n, cut, got, want)
			}
		}
	}
}

func TestVnetHdrRoundTrip(t *testing.T) {
	h := VnetHdr{Flags: NeedsCsum, GSOType: GSOTCPv6 | GSOECN, HdrLen: 72, GSOSize: 1388, CsumStart: 40, CsumOffset: 16}
	b := make([]byte, VnetHdrLen+1)
	b[VnetHdrLen] = 0xaa
	h.Put(b)
	if got := ParseVnetHdr(b); got != h || b[VnetHdrLen] != 0xaa {
		t.Fatalf("ParseVnetHdr(Put(%+v)) = %+v", h, got)
	}
}

// segments cuts super (layout ihl, hl) into segments of gso payload bytes with
// TCPSegmentHeaders, or UDPSegmentHeaders when udp, and returns them whole.
func segments(super []byte, ihl, hl, gso int, udp bool) [][]byte {
	payload := super[hl:]
	var out [][]byte
	h := make([]byte, MaxSegHeaders)
	for i, off := 0, 0; off < len(payload); i, off = i+1, off+gso {
		seg := payload[off:min(off+gso, len(payload))]
		if udp {
			UDPSegmentHeaders(h[:hl], super, ihl, hl, i, seg)
		} else {
			TCPSegmentHeaders(h[:hl], super, ihl, hl, i, off, seg, off+gso >= len(payload))
		}
		out = append(out, append(append([]byte(nil), h[:hl]...), seg...))
	}
	return out
}

// TestSegmentTSO: a TCP super packet (TUN TSO, IPv4 and IPv6) is cut into segments
// with the lengths, IDs, sequence numbers, flags and checksums the kernel would give
// them.
func TestSegmentTSO(t *testing.T) {
	for _, c := range []struct {
		name       string
		src, dst   netip.Addr
		gso        int
		ihl, hl    int
		firstLayer gopacket.LayerType
	}{
		{"ipv4", local, peer, 1400, 20, 52, layers.LayerTypeIPv4},
		{"ipv6", local6, peer6, 1392, 40, 72, layers.LayerTypeIPv6},
	} {
		t.Run(c.name, func(t *testing.T) {
			payload := make([]byte, 10000)
			for i := range payload {
				payload[i] = byte(i * 7)
			}
			super := offloadtest.TCP(c.src, c.dst, 1000, "PFC", payload)
			ihl, hl, ok := TSOLayout(super)
			if !ok || ihl != c.ihl || hl != c.hl {
				t.Fatalf("layout %d %d %v", ihl, hl, ok)
			}
			segs := segments(super, ihl, hl, c.gso, false)
			var got []byte
			for i, pkt := range segs {
				p := gopacket.NewPacket(pkt, c.firstLayer, gopacket.Default)
				tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
				if tcp == nil || !offloadtest.TCPChecksumOK(pkt) {
					t.Fatalf("segment %d does not decode or verify: %v", i, p)
				}
				if ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ip != nil &&
					(int(ip.Length) != len(pkt) || ip.Id != uint16(100+i) || Checksum(pkt[:20]) != 0) {
					t.Fatalf("segment %d: length %d id %d, header checksum bad", i, ip.Length, ip.Id)
				}
				if ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ip != nil && (ip.FlowLabel != 7 || ip.HopLimit != 64) {
					t.Fatalf("segment %d: IPv6 header %+v", i, ip)
				}
				off, last := i*c.gso, i == len(segs)-1
				if tcp.Seq != uint32(1000+off) || tcp.PSH != last || tcp.FIN != last || tcp.CWR != (i == 0) || !tcp.ACK {
					t.Fatalf("segment %d: seq %d flags P%v F%v C%v", i, tcp.Seq, tcp.PSH, tcp.FIN, tcp.CWR)
				}
				got = append(got, tcp.Payload...)
			}
			if len(segs) != 8 || !bytes.Equal(got, payload) {
				t.Fatalf("%d segments, payload intact %v", len(segs), bytes.Equal(got, payload))
			}
		})
	}
	// Not TCP, an extension header first, or cut short: no layout.
	for _, bad := range [][]byte{offloadtest.IPv6(local6, peer6, 64, layers.IPProtocolUDP, make([]byte, 40)),
		offloadtest.IPv6(local6, peer6, 64, layers.IPProtocolIPv6HopByHop, make([]byte, 40)),
		offloadtest.TCP(local6, peer6, 1, "", nil)[:50], offloadtest.UDP(local, peer, 1, 1, make([]byte, 40))} {
		if _, _, ok := TSOLayout(bad); ok {
			t.Errorf("TSOLayout took % x", bad[:8])
		}
	}
}

// TestSegmentUSO: a UDPv4 super packet (TUN USO) is cut into datagrams with their own
// lengths, IDs and checksums.
func TestSegmentUSO(t *testing.T) {
	payload := make([]byte, 1000)
	for i := range payload {
		payload[i] = byte(i * 13)
	}
	super := offloadtest.UDP(local, peer, 40000, 100, payload)
	ihl, hl, ok := USOLayout(super)
	if !ok || ihl != 20 || hl != 28 {
		t.Fatalf("layout %d %d %v", ihl, hl, ok)
	}
	if _, _, ok := USOLayout(offloadtest.TCP(local, peer, 1, "", payload)); ok {
		t.Fatal("a TCP packet passed as UDP super packet")
	}
	segs := segments(super, ihl, hl, 300, true)
	var got []byte
	for i, pkt := range segs {
		p := gopacket.NewPacket(pkt, layers.LayerTypeIPv4, gopacket.Default)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip == nil || udp == nil {
			t.Fatalf("datagram %d does not decode: %v", i, p)
		}
		if int(ip.Length) != len(pkt) || ip.Id != uint16(100+i) || Checksum(pkt[:20]) != 0 || !offloadtest.UDPChecksumOK(pkt) {
			t.Fatalf("datagram %d: length %d id %d, checksums bad", i, ip.Length, ip.Id)
		}
		if udp.SrcPort != 40000 || udp.DstPort != 5201 {
			t.Fatalf("datagram %d: ports %d %d", i, udp.SrcPort, udp.DstPort)
		}
		got = append(got, udp.Payload...)
	}
	if len(segs) != 4 || !bytes.Equal(got, payload) {
		t.Fatalf("%d datagrams, payload intact %v", len(segs), bytes.Equal(got, payload))
	}
}

// TestSegmentUDP6 cuts an IPv6 UDP super packet (as TUN USO6 hands it) into datagrams
// and checks each one's lengths and UDP checksum.
func TestSegmentUDP6(t *testing.T) {
	payload := make([]byte, 2500)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:], 4000)
	binary.BigEndian.PutUint16(udp[2:], 5000)
	pkt := offloadtest.IPv6(local6, peer6, 64, layers.IPProtocolUDP, append(udp, payload...))
	ihl, hl, ok := USOLayout(pkt)
	if !ok || ihl != 40 || hl != 48 {
		t.Fatalf("USOLayout = %d, %d, %v", ihl, hl, ok)
	}
	segs := segments(pkt, ihl, hl, 1000, true)
	for i, d := range segs {
		if !offloadtest.UDPChecksumOK(d) {
			t.Fatalf("datagram %d: lengths or UDP checksum bad: % x", i, d[:48])
		}
	}
	if len(segs) != 3 {
		t.Fatalf("%d datagrams", len(segs))
	}
	if _, _, ok := USOLayout(offloadtest.IPv6(local6, peer6, 64, layers.IPProtocolTCP, make([]byte, 20))); ok {
		t.Error("USOLayout took an IPv6 TCP packet")
	}
}

func TestFinishChecksum(t *testing.T) {
	pkt := offloadtest.TCP(local, peer, 1, "", []byte("partial checksum"))
	want := binary.BigEndian.Uint16(pkt[36:])
	// What the kernel hands over: the pseudo-header sum in the field.
	binary.BigEndian.PutUint16(pkt[36:], Fold(Sum(pkt[12:20], 6+uint64(len(pkt)-20))))
	if !FinishChecksum(pkt, VnetHdr{Flags: NeedsCsum, CsumStart: 20, CsumOffset: 16}) {
		t.Fatal("offsets refused")
	}
	if got := binary.BigEndian.Uint16(pkt[36:]); got != want {
		t.Fatalf("checksum %04x, want %04x", got, want)
	}
	if FinishChecksum(pkt, VnetHdr{CsumStart: uint16(len(pkt)), CsumOffset: 16}) {
		t.Fatal("offsets past the end accepted")
	}
}

// coalesce runs pkts through a Run as a TUN writer would and returns what it writes:
// each run of two or more as its header buffer and payloads joined, each other
// packet behind a zero virtio-net header.
func coalesce(pkts [][]byte, uso bool) [][]byte {
	var out [][]byte
	var r Run
	in := false
	var cur [][]byte // the open run's pieces, once it has two packets
	end := func() {
		if !in {
			return
		}
		in = false
		if r.Count() > 1 {
			r.Finish()
			out = append(out, bytes.Join(cur, nil))
			return
		}
		out = append(out, append(make([]byte, VnetHdrLen), r.First()...))
	}
	for _, pkt := range pkts {
		hl, udp, ok := Coalescable(pkt, uso)
		if in && ok && r.Joins(pkt, hl, udp) {
			if r.Count() == 1 {
				hdr := make([]byte, RunHdrLen)[:VnetHdrLen+hl]
				r.Append(pkt, hdr)
				cur = [][]byte{hdr, r.First()[hl:], pkt[hl:]}
			} else {
				r.Append(pkt, nil)
				cur = append(cur, pkt[hl:])
			}
			continue
		}
		end()
		if ok {
			r.Start(pkt, hl, udp)
			in = true
			continue
		}
		out = append(out, append(make([]byte, VnetHdrLen), pkt...))
	}
	end()
	return out
}

// TestRun: in-order segments of one TCP flow (IPv4, IPv6) or, with USO, same-sized
// datagrams of one UDP flow become one super packet whose virtio-net header and
// partial checksum the kernel can take; PSH, a gap, a longer segment or another
// flow ends a run, and a run holds at most MaxRunSegments.
func TestRun(t *testing.T) {
	seg := func(src, dst netip.Addr, seq uint32, flags string, n int) []byte {
		return offloadtest.TCP(src, dst, seq, flags, bytes.Repeat([]byte{byte(seq)}, n))
	}
	s4 := func(seq uint32, flags string, n int) []byte { return seg(peer, local, seq, flags, n) }
	s6 := func(seq uint32, flags string, n int) []byte { return seg(peer6, local6, seq, flags, n) }
	dg := func(sport, id uint16, n int) []byte {
		return offloadtest.UDP(peer, local, sport, id, bytes.Repeat([]byte{byte(id)}, n))
	}
	many := make([][]byte, MaxRunSegments+3)
	for i := range many {
		many[i] = s4(uint32(100*i), "", 100)
	}
	for _, c := range []struct {
		name string
		uso  bool
		pkts [][]byte
		want []int // packets per write
	}{
		{"tcp", false, [][]byte{s4(0, "", 1000), s4(1000, "", 1000), s4(2000, "", 10)}, []int{3}},
		{"tcp6", false, [][]byte{s6(0, "", 1000), s6(1000, "", 1000), s6(2000, "", 10)}, []int{3}},
		{"psh ends", false, [][]byte{s4(0, "", 1000), s4(1000, "P", 1000), s4(2000, "", 1000)}, []int{2, 1}},
		{"gap", false, [][]byte{s4(0, "", 1000), s4(1500, "", 1000)}, []int{1, 1}},
		{"gap6", false, [][]byte{s6(0, "", 1000), s6(1500, "", 1000)}, []int{1, 1}},
		{"longer second", false, [][]byte{s6(0, "", 500), s6(500, "", 1000)}, []int{1, 1}},
		{"ipv4 then ipv6", false, [][]byte{s4(0, "", 100), s6(100, "", 100)}, []int{1, 1}},
		{"fin", false, [][]byte{s4(0, "", 100), s4(100, "F", 100)}, []int{1, 1}},
		{"at most", false, many, []int{MaxRunSegments, 3}},
		{"udp", true, [][]byte{dg(1, 1, 64), dg(1, 2, 64), dg(1, 3, 10)}, []int{3}},
		{"udp other flow", true, [][]byte{dg(1, 1, 64), dg(2, 2, 64)}, []int{1, 1}},
		{"udp without uso", false, [][]byte{dg(1, 1, 64), dg(1, 2, 64)}, []int{1, 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := coalesce(c.pkts, c.uso)
			if len(out) != len(c.want) {
				t.Fatalf("%d writes, want %d", len(out), len(c.want))
			}
			k := 0
			for i, b := range out {
				vh, pkt := ParseVnetHdr(b), b[VnetHdrLen:]
				first := c.pkts[k]
				var payload []byte
				for _, p := range c.pkts[k : k+c.want[i]] {
					hl, _, _ := Coalescable(p, c.uso)
					payload = append(payload, p[hl:]...)
				}
				k += c.want[i]
				if c.want[i] == 1 {
					if vh != (VnetHdr{}) || !bytes.Equal(pkt, first) {
						t.Fatalf("write %d: single packet changed, vnet header %+v", i, vh)
					}
					continue
				}
				hl, udp, _ := Coalescable(first, c.uso)
				v6 := first[0]>>4 == 6
				wantType, ihl, off := uint8(GSOTCPv4), 20, 16
				switch {
				case udp:
					wantType, off = GSOUDPL4, 6
				case v6:
					wantType, ihl = GSOTCPv6, 40
				}
				if vh.Flags != NeedsCsum || vh.GSOType != wantType || int(vh.HdrLen) != hl ||
					int(vh.GSOSize) != len(first)-hl || int(vh.CsumStart) != ihl || int(vh.CsumOffset) != off {
					t.Fatalf("write %d: vnet header %+v", i, vh)
				}
				if !bytes.Equal(pkt[hl:], payload) {
					t.Fatalf("write %d: payloads not kept in order", i)
				}
				if !v6 && (Checksum(pkt[:20]) != 0 || int(binary.BigEndian.Uint16(pkt[2:])) != len(pkt)) {
					t.Fatalf("write %d: bad IPv4 header % x", i, pkt[:20])
				}
				ok := offloadtest.TCPChecksumOK
				if udp {
					ok = offloadtest.UDPChecksumOK
				}
				if !FinishChecksum(pkt, vh) || !ok(pkt) {
					t.Fatalf("write %d: checksum does not verify once finished", i)
				}
			}
		})
	}
}
