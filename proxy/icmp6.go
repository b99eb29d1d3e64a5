package proxy

import (
	"encoding/binary"

	"github.com/weftnet/weft/tun/offload"
)

// ICMPv6 destination unreachable (RFC 4443 section 3.1) for an IPv6 packet from a pod
// whose destination lies in the overlay but in no leased subnet: the IPv6 twin of the
// ICMP net unreachable buildUnreachable makes.
const (
	// icmp6MaxLen bounds an ICMPv6 error: it must fit the IPv6 minimum MTU.
	icmp6MaxLen = 1280
	// icmp6Unreachable, icmp6NoRoute: type 1 (destination unreachable), code 0 (no route to
	// destination), what the kernel sends for a destination it has no route to.
	icmp6Unreachable = 1
	icmp6NoRoute     = 0
)

// wantsICMPv6Error reports whether pkt (an IPv6 packet of at least the fixed header)
// may be answered with an ICMPv6 error: its source is unicast (not ::, ::1 or
// multicast), its destination is not multicast, and it is TCP, UDP or an ICMPv6
// informational message (type 128 and up), never an ICMPv6 error (RFC 4443 2.4 e).
// Packets whose first next header is an extension header get none: the header chain
// is not walked, so they could be errors or non-first fragments.
func wantsICMPv6Error(pkt []byte) bool {
	src := pkt[8:24]
	if src[0] == 0xff || pkt[24] == 0xff || isZeroOrLoopback(src) {
		return false
	}
	switch pkt[6] {
	case protoTCP, protoUDP:
		return true
	case protoICMPv6:
		return len(pkt) > ipv6HeaderLen && pkt[ipv6HeaderLen] >= 128
	}
	return false
}

// isZeroOrLoopback reports whether a (16 bytes) is :: or ::1.
func isZeroOrLoopback(a []byte) bool {
	for _, b := range a[:15] {
		if b != 0 {
			return false
		}
	}
	return a[15] <= 1
}

// buildUnreachable6 writes into out (at least icmp6MaxLen bytes) an ICMPv6 no-route
// error from the address from back to pkt's source, quoting as much of pkt as keeps
// the error within 1280 bytes, and returns its length.
func buildUnreachable6(out, pkt []byte, from [16]byte) int {
	quote := min(len(pkt), icmp6MaxLen-ipv6HeaderLen-8)
	plen := 8 + quote
	n := ipv6HeaderLen + plen
	h := out[:n]
	be := binary.BigEndian
	be.PutUint32(h[0:4], 6<<28) // version 6, traffic class 0, flow label 0
	be.PutUint16(h[4:6], uint16(plen))
	h[6], h[7] = protoICMPv6, 64
	copy(h[8:24], from[:])
	copy(h[24:40], pkt[8:24]) // back to the sender
	ic := h[ipv6HeaderLen:]
	ic[0], ic[1] = icmp6Unreachable, icmp6NoRoute
	be.PutUint16(ic[2:4], 0)
	be.PutUint32(ic[4:8], 0) // unused
	copy(ic[8:], pkt[:quote])
	// pseudo header: addresses, upper-layer length, next header
	ac := offload.Sum(h[8:40], uint64(plen)+protoICMPv6)
	be.PutUint16(ic[2:4], ^offload.Fold(offload.Sum(ic, ac)))
	return n
}

// subnetStart returns the first address of the IPv6 subnet holding the address
// hi:lo (where that subnet's host would have its flannel0 address).
func (t *table6) subnetStart(hi, lo uint64) [16]byte {
	var a [16]byte
	binary.BigEndian.PutUint64(a[:8], hi&t.subHi)
	binary.BigEndian.PutUint64(a[8:], lo&t.subLo)
	return a
}
