package proxy

import "encoding/binary"

const (
	ipv6HeaderLen = 40
	protoICMPv6   = 58
)

// routeEgress6 is RouteEgress for an IPv6 packet (at least a header long): the peer
// whose IPv6 subnet holds the destination, the hop limit decremented.
func (s *Snapshot) routeEgress6(pkt []byte) (*Peer, DropReason) {
	if s.v6 == nil {
		return nil, DropNotOverlay
	}
	hi, lo := binary.BigEndian.Uint64(pkt[24:32]), binary.BigEndian.Uint64(pkt[32:40])
	p := s.v6.lookup(hi, lo)
	if p == nil {
		if s.v6.slot(hi, lo) < 0 || s.v6.isLocal(hi, lo) {
			return nil, DropNotOverlay
		}
		return nil, DropNoRoute
	}
	if pkt[7] <= 1 {
		return nil, DropTTL
	}
	pkt[7]--
	return p, DropNone
}

// checkIngress6 is CheckIngress for a payload whose version is 6: src holds a lease,
// the payload is exactly one IPv6 packet (payload length against the datagram's; a
// jumbogram's 0 does not match), its source lies in an IPv6 subnet src holds, its
// destination in our IPv6 subnet and is unicast, and its hop limit survives a
// decrement. Extension headers pass, as IPv4 options do.
func (s *Snapshot) checkIngress6(pkt []byte, src uint32) DropReason {
	if !s.HoldsLease(src) {
		return DropUnknownSource
	}
	return s.checkInner6(pkt, false, src, [16]byte{})
}

// checkInner6 checks an IPv6 payload from a sender that holds a lease: src over the
// IPv4 underlay, src6 over the IPv6 one (under6).
func (s *Snapshot) checkInner6(pkt []byte, under6 bool, src uint32, src6 [16]byte) DropReason {
	switch {
	case len(pkt) < ipv6HeaderLen:
		return DropTruncated
	case pkt[0]>>4 != 6 || s.v6 == nil:
		return DropMalformed
	}
	switch total := ipv6HeaderLen + int(binary.BigEndian.Uint16(pkt[4:6])); {
	case total > len(pkt):
		return DropTruncated
	case total < len(pkt):
		return DropBadLength
	}
	p := s.v6.lookup(binary.BigEndian.Uint64(pkt[8:16]), binary.BigEndian.Uint64(pkt[16:24]))
	if p == nil || p.under6 != under6 || (under6 && p.ip6 != src6) || (!under6 && p.ip != src) {
		return DropSpoofedSource
	}
	if !s.v6.isLocal(binary.BigEndian.Uint64(pkt[24:32]), binary.BigEndian.Uint64(pkt[32:40])) {
		if pkt[24] == 0xff {
			return DropNotUnicast
		}
		return DropNotLocal
	}
	if pkt[7] <= 1 {
		return DropTTL
	}
	return DropNone
}

// decHop decrements the TTL (IPv4, checksum updated) or hop limit (IPv6) of a
// checked packet.
func decHop(pkt []byte) {
	if pkt[0]>>4 == 6 {
		pkt[7]--
		return
	}
	decTTL(pkt)
}

// CheckIngressFrom6 is CheckIngress for a datagram that came over the IPv6 underlay
// from src: src holds a lease, and the inner packet (IPv4 or IPv6) passes the same
// checks, its source in a subnet that src holds.
func (s *Snapshot) CheckIngressFrom6(pkt []byte, src [16]byte) DropReason {
	if !s.HoldsLease6(src) {
		return DropUnknownSource
	}
	if len(pkt) > 0 && pkt[0]>>4 == 6 {
		return s.checkInner6(pkt, true, 0, src)
	}
	if r := checkIPv4(pkt); r != DropNone {
		return r
	}
	from, to := binary.BigEndian.Uint32(pkt[12:16]), binary.BigEndian.Uint32(pkt[16:20])
	if p := s.Lookup(from); p == nil || !p.under6 || p.ip6 != src {
		return DropSpoofedSource
	}
	return s.checkDst4(pkt, from, to)
}
