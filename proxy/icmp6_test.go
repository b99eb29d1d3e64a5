package proxy

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/weftnet/weft/tun/offload"
	"github.com/weftnet/weft/tun/offload/offloadtest"
)

// TestEgressUnreachable6: IPv6 packets to an overlay subnet without a lease get an
// ICMPv6 no-route error back through the TUN (rate limited like IPv4's), from the
// unreachable subnet's first address, with a valid checksum and the offending packet
// quoted; packets that must not be answered are only counted.
func TestEgressUnreachable6(t *testing.T) {
	tb := &Table{}
	tb.snap.Store(testSnapshot6(t))
	dst := netip.MustParseAddr("fd00:10:0:9::7")
	echo := func(src netip.Addr) []byte {
		return offloadtest.IPv6(src, dst, 64, layers.IPProtocolICMPv6, []byte{128, 0, 0, 0, 0, 1, 0, 1, 'h', 'i'})
	}
	big := offloadtest.IPv6(t6LocalIP, dst, 64, layers.IPProtocolUDP, make([]byte, 1400))
	for _, c := range []struct {
		name    string
		pkt     []byte
		answers bool
	}{
		{"echo request", echo(t6LocalIP), true},
		{"udp, quote cut to 1280", big, true},
		{"tcp", offloadtest.IPv6(t6LocalIP, dst, 64, layers.IPProtocolTCP, make([]byte, 20)), true},
		{"icmpv6 error", offloadtest.IPv6(t6LocalIP, dst, 64, layers.IPProtocolICMPv6, []byte{1, 0, 0, 0, 0, 0, 0, 0}), false},
		{"extension header", offloadtest.IPv6(t6LocalIP, dst, 64, layers.IPProtocolIPv6HopByHop, make([]byte, 16)), false},
		{"unspecified source", echo(netip.IPv6Unspecified()), false},
		{"multicast source", echo(netip.MustParseAddr("ff02::1")), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ft := &fakeTUN{}
			var cnt counters
			w := newWorker(ft, tb, 4, 1500, 1500, false, &cnt, nopLogger())
			w.tx.sizes[0] = copy(w.tx.bufs[0][Headroom:], c.pkt)
			w.egressBatch(1)
			if cnt.drops[DropNoRoute].Load() != 1 {
				t.Fatalf("no_route drops = %d, want 1", cnt.drops[DropNoRoute].Load())
			}
			if !c.answers {
				if len(ft.written) != 0 || cnt.icmpSent.Load() != 0 {
					t.Fatalf("answered: % x", ft.written)
				}
				return
			}
			if len(ft.written) != 1 || cnt.icmpSent.Load() != 1 {
				t.Fatalf("%d replies (%d counted), want 1", len(ft.written), cnt.icmpSent.Load())
			}
			out := ft.written[0]
			p := gopacket.NewPacket(out, layers.LayerTypeIPv6, gopacket.Default)
			ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
			ic, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
			if ip == nil || ic == nil {
				t.Fatalf("not IPv6+ICMPv6: %v", p)
			}
			if ic.TypeCode != layers.CreateICMPv6TypeCode(layers.ICMPv6TypeDestinationUnreachable, layers.ICMPv6CodeNoRouteToDst) {
				t.Fatalf("type/code %v", ic.TypeCode)
			}
			if !ip.SrcIP.Equal(netip.MustParseAddr("fd00:10:0:9::").AsSlice()) || !ip.DstIP.Equal(c.pkt[8:24]) || ip.HopLimit != 64 {
				t.Fatalf("ICMPv6 %v -> %v hop limit %d", ip.SrcIP, ip.DstIP, ip.HopLimit)
			}
			ac := offload.Sum(out[8:40], uint64(len(out)-40)+protoICMPv6)
			if len(out) > icmp6MaxLen || int(ip.Length) != len(out)-40 || offload.Fold(offload.Sum(out[40:], ac)) != 0xffff {
				t.Fatalf("length %d (payload %d) or checksum bad", len(out), ip.Length)
			}
			// The quote is the packet as the pod sent it, cut to fit 1280 bytes.
			want := c.pkt[:min(len(c.pkt), icmp6MaxLen-48)]
			if q := out[48:]; !bytes.Equal(q[8:], want[8:len(q)]) || len(q) != len(want) {
				t.Fatalf("quote of %d bytes, want %d", len(q), len(want))
			}
		})
	}
}

// FuzzUnreachable6 builds ICMPv6 errors for arbitrary IPv6 packets: never a panic, and
// every error is at most 1280 bytes with a checksum that verifies.
func FuzzUnreachable6(f *testing.F) {
	f.Add(offloadtest.IPv6(t6LocalIP, t6PeerPod, 64, layers.IPProtocolUDP, []byte("payload")))
	f.Add(make([]byte, 40))
	out := make([]byte, icmp6MaxLen)
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if len(pkt) < ipv6HeaderLen {
			return
		}
		pkt[0] = 0x60 | pkt[0]&0x0f
		_ = wantsICMPv6Error(pkt)
		n := buildUnreachable6(out, pkt, [16]byte{0xfd})
		e := out[:n]
		ac := offload.Sum(e[8:40], uint64(n-40)+protoICMPv6)
		if n > icmp6MaxLen || int(e[4])<<8|int(e[5]) != n-40 || offload.Fold(offload.Sum(e[40:], ac)) != 0xffff {
			t.Fatalf("bad error of %d bytes for a %d-byte packet", n, len(pkt))
		}
	})
}
