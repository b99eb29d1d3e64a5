package proxy

import (
	"encoding/binary"

	"github.com/weftnet/weft/tun/offload"
)

// Headroom is the space left in front of every packet in a worker's buffers, for
// headers a later offload (virtio-net header) puts there.
const Headroom = 16

const (
	ipv4HeaderLen = 20
	icmpQuoteLen  = 8 // bytes of the offending datagram's payload quoted in ICMP errors
	protoTCP      = 6
	protoUDP      = 17
)

// RouteEgress checks a packet read from the TUN device, finds the peer for its
// destination and decrements its TTL (IPv6: hop limit). On a drop it returns nil and
// the reason.
func (s *Snapshot) RouteEgress(pkt []byte) (*Peer, DropReason) {
	if len(pkt) < ipv4HeaderLen || pkt[0]>>4 != 4 || pkt[0]&0x0f < 5 || int(pkt[0]&0x0f)*4 > len(pkt) {
		if len(pkt) >= ipv6HeaderLen && pkt[0]>>4 == 6 {
			return s.routeEgress6(pkt)
		}
		return nil, DropMalformed
	}
	dst := binary.BigEndian.Uint32(pkt[16:20])
	p := s.Lookup(dst)
	if p == nil {
		if !s.InNetwork(dst) || s.IsLocal(dst) {
			return nil, DropNotOverlay
		}
		return nil, DropNoRoute
	}
	if pkt[8] <= 1 {
		return nil, DropTTL
	}
	decTTL(pkt)
	return p, DropNone
}

// CheckIngress checks the payload of a datagram that came from the public address src
// (big-endian); an IPv6 payload goes to checkIngress6. For IPv4: src holds a lease, the payload is an IPv4 packet with a valid header
// checksum (coalescing rewrites headers, so it must not launder bad ones) whose total
// length is the datagram's, its source lies in a subnet src holds, its destination in
// ours and is unicast, and its TTL survives a decrement. A datagram from an address
// without a lease counts as DropUnknownSource whatever else is wrong with it.
//
// What passes on purpose: IP options (legal, the kernel handles them on the way to
// the pod) and fragments (a pod's kernel fragments what does not fit flannel0's MTU,
// and the destination pod reassembles them); the network address of our subnet (it
// is flannel0's own address, which peers may reach).
func (s *Snapshot) CheckIngress(pkt []byte, src uint32) DropReason {
	if r := checkIPv4(pkt); r != DropNone {
		if r == DropMalformed && pkt[0]>>4 == 6 {
			return s.checkIngress6(pkt, src)
		}
		if !s.HoldsLease(src) {
			return DropUnknownSource
		}
		return r
	}
	from, to := binary.BigEndian.Uint32(pkt[12:16]), binary.BigEndian.Uint32(pkt[16:20])
	if p := s.Lookup(from); p == nil || p.ip != src {
		if !s.HoldsLease(src) {
			return DropUnknownSource
		}
		return DropSpoofedSource
	}
	return s.checkDst4(pkt, from, to)
}

// checkDst4 is the rest of the IPv4 ingress checks once the sender and the inner
// source agree: destination in our subnet and unicast, TTL.
func (s *Snapshot) checkDst4(pkt []byte, from, to uint32) DropReason {
	if !s.IsLocal(to) {
		if to>>28 == 0xe || to == 0xffffffff {
			return DropNotUnicast
		}
		return DropNotLocal
	}
	if host := ^s.subMask; to&host == host || from&host == host {
		return DropNotUnicast
	}
	if pkt[8] <= 1 {
		return DropTTL
	}
	return DropNone
}

// checkIPv4 checks the IPv4 header of a packet from a peer: version, header length,
// total length against the packet's, header checksum.
func checkIPv4(pkt []byte) DropReason {
	if len(pkt) < ipv4HeaderLen {
		return DropTruncated
	}
	if pkt[0]>>4 != 4 {
		return DropMalformed
	}
	ihl, total := int(pkt[0]&0x0f)*4, int(binary.BigEndian.Uint16(pkt[2:4]))
	switch {
	case ihl < ipv4HeaderLen || ihl > total:
		return DropBadHeaderLen
	case total > len(pkt):
		return DropTruncated
	case total < len(pkt):
		return DropBadLength
	case offload.Fold(offload.Sum(pkt[:ihl], 0)) != 0xffff:
		return DropBadChecksum
	}
	return DropNone
}

// decTTL decrements the TTL of the IPv4 header h and updates its checksum
// incrementally (RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m')).
func decTTL(h []byte) {
	m := binary.BigEndian.Uint16(h[8:10]) // TTL and protocol
	h[8]--
	m1 := m - 0x0100
	sum := uint32(^binary.BigEndian.Uint16(h[10:12])) + uint32(^m) + uint32(m1)
	sum = (sum & 0xffff) + (sum >> 16)
	sum = (sum & 0xffff) + (sum >> 16)
	binary.BigEndian.PutUint16(h[10:12], ^uint16(sum))
}

// wantsICMPError reports whether pkt may be answered with an ICMP error (RFC 1122
// 3.2.2): not about an ICMP error, not a non-first fragment, not from a
// non-unicast source.
func wantsICMPError(pkt []byte) bool {
	if pkt[0]>>4 != 4 { // IPv6: wantsICMPv6Error
		return false
	}
	ihl := int(pkt[0]&0x0f) * 4
	if binary.BigEndian.Uint16(pkt[6:8])&0x1fff != 0 {
		return false
	}
	src := pkt[12]
	if src == 0 || src >= 224 || src == 127 {
		return false
	}
	if pkt[9] == 1 { // ICMP: answer only queries
		if len(pkt) < ihl+1 {
			return false
		}
		switch pkt[ihl] {
		case 0, 8, 13, 14:
		default:
			return false
		}
	}
	return true
}

// buildUnreachable writes into out an ICMP destination unreachable (code) from from
// (big-endian) about pkt, and returns its length; out must hold
// ipv4HeaderLen+8+60+icmpQuoteLen bytes.
func buildUnreachable(out, pkt []byte, from uint32, code byte) int {
	quote := int(pkt[0]&0x0f)*4 + icmpQuoteLen
	quote = min(quote, len(pkt))
	n := ipv4HeaderLen + 8 + quote
	h := out[:n]
	h[0], h[1] = 0x45, 0xc0 // IHL 5, DSCP CS6 like the kernel's ICMP errors
	binary.BigEndian.PutUint16(h[2:4], uint16(n))
	binary.BigEndian.PutUint32(h[4:8], 0) // id, flags, fragment offset
	h[8], h[9] = 64, 1                    // TTL, protocol ICMP
	binary.BigEndian.PutUint16(h[10:12], 0)
	binary.BigEndian.PutUint32(h[12:16], from)
	copy(h[16:20], pkt[12:16]) // back to the sender
	binary.BigEndian.PutUint16(h[10:12], offload.Checksum(h[:ipv4HeaderLen]))
	ic := h[ipv4HeaderLen:]
	ic[0], ic[1] = 3, code
	binary.BigEndian.PutUint16(ic[2:4], 0)
	binary.BigEndian.PutUint32(ic[4:8], 0)
	copy(ic[8:], pkt[:quote])
	binary.BigEndian.PutUint16(ic[2:4], offload.Checksum(ic))
	return n
}
