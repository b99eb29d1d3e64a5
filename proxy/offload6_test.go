package proxy

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/tun/offload"
	"github.com/weftnet/weft/tun/offload/offloadtest"
)

// TestIngressCoalesce6: in-order TCPv6 segments of one flow from a peer are written to
// the TUN as one GSO TCPv6 super packet whose checksum the kernel can finish; a gap, a
// PSH or another flow ends the run, and IPv4 and IPv6 runs never mix.
func TestIngressCoalesce6(t *testing.T) {
	seg := func(seq uint32, flags string, n int) []byte {
		return offloadtest.TCP(t6PeerPod, t6LocalIP, seq, flags, bytes.Repeat([]byte{byte(seq)}, n))
	}
	other := offloadtest.TCP(t6PeerPod, netip.MustParseAddr("fd00:10:0:1::6"), 5000, "", make([]byte, 100))
	v4 := offloadtest.TCP(tPeerPod, tLocalIP, 1000, "", make([]byte, 1000))
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
				vh := offload.ParseVnetHdr(b)
				pkt := b[offload.VnetHdrLen:]
				if (c.want[i] > 1) != (vh.GSOType == offload.GSOTCPv6) {
					t.Fatalf("write %d of %d packets: gso type %d", i, c.want[i], vh.GSOType)
				}
				if pkt[0]>>4 == 4 {
					total += len(pkt) - 52
					continue
				}
				if pkt[7] != 63 {
					t.Fatalf("write %d: hop limit %d, want 63", i, pkt[7])
				}
				if vh.GSOType == offload.GSOTCPv6 {
					if vh.Flags != offload.NeedsCsum || vh.CsumStart != 40 || vh.CsumOffset != 16 || vh.HdrLen != 72 ||
						int(vh.GSOSize) != len(c.pkts[0])-72 {
						t.Fatalf("write %d: vnet header %+v", i, vh)
					}
					if !offload.FinishChecksum(pkt, vh) {
						t.Fatalf("write %d: checksum offsets do not fit", i)
					}
				} else if vh != (offload.VnetHdr{}) {
					t.Fatalf("write %d: single packet with vnet header %+v", i, vh)
				}
				if !offloadtest.TCPChecksumOK(pkt) {
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
