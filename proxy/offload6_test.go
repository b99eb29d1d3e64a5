package proxy

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/weftnet/weft/internal/ipconv"
)

// tcp6Packet builds an IPv6/TCP packet with gopacket (checksum computed), with the
// same TCP header as tcpPacket.
func tcp6Packet(src, dst netip.Addr, seq uint32, flags string, payload []byte) []byte {
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, FlowLabel: 7,
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

// tcp6ChecksumOK verifies an IPv6 packet's TCP checksum over the pseudo header, and
// its payload length.
func tcp6ChecksumOK(pkt []byte) bool {
	if int(binary.BigEndian.Uint16(pkt[4:])) != len(pkt)-ipv6HeaderLen {
		return false
	}
	ac := sum(pkt[8:40], uint64(protoTCP)+uint64(len(pkt)-ipv6HeaderLen))
	return fold(sum(pkt[ipv6HeaderLen:], ac)) == 0xffff
}

// udp6ChecksumOK verifies an IPv6 packet's UDP checksum, UDP length and payload length.
func udp6ChecksumOK(pkt []byte) bool {
	n := len(pkt) - ipv6HeaderLen
	be := binary.BigEndian
	if int(be.Uint16(pkt[4:])) != n || n < udpHeaderLen || int(be.Uint16(pkt[ipv6HeaderLen+4:])) != n {
		return false
	}
	ac := sum(pkt[8:40], uint64(protoUDP)+uint64(n))
	return fold(sum(pkt[ipv6HeaderLen:], ac)) == 0xffff
}

// TestSegmentTSO6: a TCPv6 super packet (TUN TSO6) is cut into segments with the
// payload length, sequence numbers, flags and checksum the kernel would give them.
func TestSegmentTSO6(t *testing.T) {
	payload := make([]byte, 10000)
	for i := range payload {
		payload[i] = byte(i * 13)
	}
	super := tcp6Packet(t6LocalIP, t6PeerPod, 1000, "PFC", payload)
	const gso = 1392
	ihl, hl, ok := tsoLayout(super)
	if !ok || ihl != 40 || hl != 72 {
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
		p := gopacket.NewPacket(pkt, layers.LayerTypeIPv6, gopacket.Default)
		ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if ip == nil || tcp == nil {
			t.Fatalf("segment %d does not decode: %v", i, p)
		}
		if !tcp6ChecksumOK(pkt) || ip.FlowLabel != 7 || ip.HopLimit != 64 {
			t.Fatalf("segment %d: payload length %d, checksum or header bad", i, ip.Length)
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
	// Not TCP, or an extension header first: no layout.
	for _, bad := range [][]byte{ipv6Packet(t6LocalIP, t6PeerPod, 64, layers.IPProtocolUDP, make([]byte, 40)),
		ipv6Packet(t6LocalIP, t6PeerPod, 64, layers.IPProtocolIPv6HopByHop, make([]byte, 40)), super[:50]} {
		if _, _, ok := tsoLayout(bad); ok {
			t.Errorf("tsoLayout took % x", bad[:8])
		}
	}
}

// TestIngressCoalesce6: in-order TCPv6 segments of one flow from a peer are written to
// the TUN as one GSO TCPv6 super packet whose checksum the kernel can finish; a gap, a
// PSH or another flow ends the run, and IPv4 and IPv6 runs never mix.
func TestIngressCoalesce6(t *testing.T) {
	seg := func(seq uint32, flags string, n int) []byte {
		return tcp6Packet(t6PeerPod, t6LocalIP, seq, flags, bytes.Repeat([]byte{byte(seq)}, n))
	}
	other := tcp6Packet(t6PeerPod, netip.MustParseAddr("fd00:10:0:1::6"), 5000, "", make([]byte, 100))
	v4 := tcpPacket(tPeerPod, tLocalIP, 1000, "", make([]byte, 1000))
	for _, c := range []struct {
		name  string
		pkts  [][]byte
		want  []int // packets per TUN write
		bytes int
	}{
		{"run", [][]byte{seg(0, "", 1000), seg(1000, "", 1000), seg(2000, "", 1000)}, []int{3}, 3000},
		{"short last", [][]byte{seg(0, "", 1000), seg(1000, "", 1000), seg(2000, "", 10)}, []int{3}, 2010},
		{"psh ends run", [][]byte{seg(0, "", 1000), seg(1000, "P", 1000), seg(2000, "", 1000)}, []int{2, 1}, 3000},
		{"gap", [][]byte{seg(0, "", 1000), seg(1500, "", 1000)}, []int{1, 1}, 2000},
		{"other flow", [][]byte{seg(0, "", 100), other, seg(100, "", 100)}, []int{1, 1, 1}, 300},
		{"ipv4 between", [][]byte{seg(0, "", 1000), v4, seg(1000, "", 1000)}, []int{1, 1, 1}, 3000},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := &Table{}
			tb.snap.Store(testSnapshot6(t))
			ft := &vnetTUN{}
			var cnt counters
			w := newWorker(ft, tb, 8, 1500, 1500, false, &cnt, nopLogger())
			for i, p := range c.pkts {
				w.rx.sizes[i] = copy(w.rx.bufs[i][Headroom:], p)
				w.rx.src[i] = ipconv.U32(tPeerIP)
			}
			w.ingressProcess(len(c.pkts))
			if len(ft.written) != len(c.want) {
				var st Stats
				cnt.addTo(&st)
				t.Fatalf("%d writes, want %d (drops %v)", len(ft.written), len(c.want), st.Drops)
			}
			total := 0
			for i, b := range ft.written {
				vh := parseVnetHdr(b)
				pkt := b[vnetHdrLen:]
				if (c.want[i] > 1) != (vh.gsoType == vnetGSOTCPv6) {
					t.Fatalf("write %d of %d packets: gso type %d", i, c.want[i], vh.gsoType)
				}
				if pkt[0]>>4 == 4 {
					total += len(pkt) - 52
					continue
				}
				if pkt[7] != 63 {
					t.Fatalf("write %d: hop limit %d, want 63", i, pkt[7])
				}
				if vh.gsoType == vnetGSOTCPv6 {
					if vh.flags != vnetNeedsCsum || vh.csumStart != 40 || vh.csumOffset != 16 || vh.hdrLen != 72 ||
						int(vh.gsoSize) != len(c.pkts[0])-72 {
						t.Fatalf("write %d: vnet header %+v", i, vh)
					}
					if !finishChecksum(pkt, vh) {
						t.Fatalf("write %d: checksum offsets do not fit", i)
					}
				} else if vh != (vnetHdr{}) {
					t.Fatalf("write %d: single packet with vnet header %+v", i, vh)
				}
				if !tcp6ChecksumOK(pkt) {
					t.Fatalf("write %d: TCP checksum or payload length does not verify", i)
				}
				total += len(pkt) - 72
			}
			if total != c.bytes {
				t.Fatalf("payload %d bytes, want %d", total, c.bytes)
			}
		})
	}
}
