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

// vnetUSOTUN is a TUN queue with offloads and UDP segmentation offload.
type vnetUSOTUN struct{ gatherTUN }

func (*vnetUSOTUN) USO() bool { return true }

// udpPacket builds an IPv4/UDP packet from src:port with gopacket (checksums computed).
func udpPacket(src, dst netip.Addr, sport uint16, id uint16, payload []byte) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, Id: id,
		SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: 5201}
	_ = udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		ip, udp, gopacket.Payload(payload)); err != nil {
		panic(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// udpChecksumOK verifies a UDP checksum (and length field) over the pseudo header.
func udpChecksumOK(pkt []byte) bool {
	ihl := int(pkt[0]&0x0f) * 4
	if int(binary.BigEndian.Uint16(pkt[ihl+4:])) != len(pkt)-ihl {
		return false
	}
	ac := sum(pkt[12:20], uint64(protoUDP)+uint64(len(pkt)-ihl))
	return fold(sum(pkt[ihl:], ac)) == 0xffff
}

func TestSegmentUSO(t *testing.T) {
	payload := make([]byte, 1000)
	for i := range payload {
		payload[i] = byte(i * 13)
	}
	super := udpPacket(tLocalIP, tPeerPod, 40000, 100, payload)
	const gso = 300
	ihl, hl, ok := usoLayout(super)
	if !ok || ihl != 20 || hl != 28 {
		t.Fatalf("layout %d %d %v", ihl, hl, ok)
	}
	if _, _, ok := usoLayout(tcpPacket(tLocalIP, tPeerPod, 1, "", payload)); ok {
		t.Fatal("a TCP packet passed as UDP super packet")
	}
	var got []byte
	h := make([]byte, maxSegHeaders)
	n := 0
	for i, off := 0, 0; off < len(payload); i, off = i+1, off+gso {
		seg := payload[off:min(off+gso, len(payload))]
		segmentUDPHeaders(h[:hl], super, ihl, hl, i, seg)
		pkt := append(append([]byte(nil), h[:hl]...), seg...)
		p := gopacket.NewPacket(pkt, layers.LayerTypeIPv4, gopacket.Default)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip == nil || udp == nil {
			t.Fatalf("datagram %d does not decode: %v", i, p)
		}
		if int(ip.Length) != len(pkt) || ip.Id != uint16(100+i) || checksum(pkt[:20]) != 0 || !udpChecksumOK(pkt) {
			t.Fatalf("datagram %d: length %d id %d, checksums bad", i, ip.Length, ip.Id)
		}
		if udp.SrcPort != 40000 || udp.DstPort != 5201 || int(udp.Length) != 8+len(seg) {
			t.Fatalf("datagram %d: ports %d %d length %d", i, udp.SrcPort, udp.DstPort, udp.Length)
		}
		got = append(got, udp.Payload...)
		n++
	}
	if n != 4 || !bytes.Equal(got, payload) {
		t.Fatalf("%d datagrams, payload intact %v", n, bytes.Equal(got, payload))
	}
}

// TestIngressCoalesceUDP: with USO on the queue, runs of same-sized datagrams of one
// UDP flow become one write (GSO UDP_L4, checksum partial); anything else is written
// alone, and without USO nothing UDP is coalesced.
func TestIngressCoalesceUDP(t *testing.T) {
	dg := func(sport uint16, id uint16, n int) []byte {
		return udpPacket(tPeerPod, tLocalIP, sport, id, bytes.Repeat([]byte{byte(id)}, n))
	}
	frag := dg(1, 9, 64)
	frag[6] = 0x20 // more fragments
	binary.BigEndian.PutUint16(frag[10:], 0)
	binary.BigEndian.PutUint16(frag[10:], checksum(frag[:20]))
	many := make([][]byte, 70)
	for i := range many {
		many[i] = dg(1, uint16(i), 64)
	}
	for _, c := range []struct {
		name string
		uso  bool
		pkts [][]byte
		want []int // datagrams per TUN write
	}{
		{"run", true, [][]byte{dg(1, 1, 64), dg(1, 2, 64), dg(1, 3, 64)}, []int{3}},
		{"short last", true, [][]byte{dg(1, 1, 64), dg(1, 2, 64), dg(1, 3, 10)}, []int{3}},
		{"after short", true, [][]byte{dg(1, 1, 64), dg(1, 2, 10), dg(1, 3, 64)}, []int{2, 1}},
		{"longer second", true, [][]byte{dg(1, 1, 10), dg(1, 2, 64)}, []int{1, 1}},
		{"other flow", true, [][]byte{dg(1, 1, 64), dg(2, 2, 64), dg(1, 3, 64)}, []int{1, 1, 1}},
		{"fragment", true, [][]byte{dg(1, 1, 64), frag}, []int{1, 1}},
		{"at most 64", true, many, []int{64, 6}},
		{"without USO", false, [][]byte{dg(1, 1, 64), dg(1, 2, 64)}, []int{1, 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := &Table{}
			tb.snap.Store(testSnapshot(t))
			var ft interface {
				TUN
				VnetHdr() bool
			} = &vnetTUN{}
			if c.uso {
				ft = &vnetUSOTUN{}
			}
			var cnt counters
			w := newWorker(ft, tb, 128, 1500, 1500, false, &cnt, nopLogger())
			for i, p := range c.pkts {
				w.rx.sizes[i] = copy(w.rx.bufs[i][Headroom:], p)
				w.rx.src[i] = ipconv.U32(tPeerIP)
			}
			w.ingressProcess(len(c.pkts))
			var written [][]byte
			switch f := ft.(type) {
			case *vnetTUN:
				written = f.written
			case *vnetUSOTUN:
				written = f.written
			}
			if len(written) != len(c.want) {
				t.Fatalf("%d writes, want %d", len(written), len(c.want))
			}
			k := 0
			for i, b := range written {
				vh := parseVnetHdr(b)
				pkt := b[vnetHdrLen:]
				if checksum(pkt[:20]) != 0 || int(binary.BigEndian.Uint16(pkt[2:])) != len(pkt) || pkt[8] != 63 {
					t.Fatalf("write %d: bad IPv4 header % x", i, pkt[:20])
				}
				if c.want[i] == 1 {
					if vh != (vnetHdr{}) || !bytes.Equal(pkt[20:], c.pkts[k][20:]) {
						t.Fatalf("write %d: single datagram changed, vnet header %+v", i, vh)
					}
					k++
					continue
				}
				segSize := len(c.pkts[k]) - 28
				if vh.gsoType != vnetGSOUDPL4 || vh.flags != vnetNeedsCsum || vh.csumStart != 20 || vh.csumOffset != 6 ||
					vh.hdrLen != 28 || int(vh.gsoSize) != segSize {
					t.Fatalf("write %d: vnet header %+v", i, vh)
				}
				// Finish the partial checksum as the kernel would, then verify.
				if !finishChecksum(pkt, vh) || !udpChecksumOK(pkt) {
					t.Fatalf("write %d: UDP checksum does not verify", i)
				}
				var payload []byte
				for _, p := range c.pkts[k : k+c.want[i]] {
					payload = append(payload, p[28:]...)
				}
				if !bytes.Equal(pkt[28:], payload) {
					t.Fatalf("write %d: payloads not kept in order", i)
				}
				k += c.want[i]
			}
			if cnt.rxPackets.Load() != uint64(len(c.pkts)) || cnt.rxWrites.Load() != uint64(len(c.want)) {
				t.Fatalf("rx packets %d writes %d", cnt.rxPackets.Load(), cnt.rxWrites.Load())
			}
		})
	}
}
