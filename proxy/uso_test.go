package proxy

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/tun/offload"
	"github.com/weftnet/weft/tun/offload/offloadtest"
)

// vnetUSOTUN is a TUN queue with offloads and UDP segmentation offload.
type vnetUSOTUN struct{ gatherTUN }

func (*vnetUSOTUN) USO() bool { return true }

// TestIngressCoalesceUDP: with USO on the queue, runs of same-sized datagrams of one
// UDP flow become one write (GSO UDP_L4, checksum partial); anything else is written
// alone, and without USO nothing UDP is coalesced.
func TestIngressCoalesceUDP(t *testing.T) {
	dg := func(sport uint16, id uint16, n int) []byte {
		return offloadtest.UDP(tPeerPod, tLocalIP, sport, id, bytes.Repeat([]byte{byte(id)}, n))
	}
	frag := dg(1, 9, 64)
	frag[6] = 0x20 // more fragments
	binary.BigEndian.PutUint16(frag[10:], 0)
	binary.BigEndian.PutUint16(frag[10:], offload.Checksum(frag[:20]))
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
				vh := offload.ParseVnetHdr(b)
				pkt := b[offload.VnetHdrLen:]
				if offload.Checksum(pkt[:20]) != 0 || int(binary.BigEndian.Uint16(pkt[2:])) != len(pkt) || pkt[8] != 63 {
					t.Fatalf("write %d: bad IPv4 header % x", i, pkt[:20])
				}
				if c.want[i] == 1 {
					if vh != (offload.VnetHdr{}) || !bytes.Equal(pkt[20:], c.pkts[k][20:]) {
						t.Fatalf("write %d: single datagram changed, vnet header %+v", i, vh)
					}
					k++
					continue
				}
				segSize := len(c.pkts[k]) - 28
				if vh.GSOType != offload.GSOUDPL4 || vh.Flags != offload.NeedsCsum || vh.CsumStart != 20 || vh.CsumOffset != 6 ||
					vh.HdrLen != 28 || int(vh.GSOSize) != segSize {
					t.Fatalf("write %d: vnet header %+v", i, vh)
				}
				// Finish the partial checksum as the kernel would, then verify.
				if !offload.FinishChecksum(pkt, vh) || !offloadtest.UDPChecksumOK(pkt) {
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
