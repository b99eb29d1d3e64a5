// Package offload holds the virtio-net headers and the segmentation and coalescing
// that a TUN queue with offloads (tun.Config.Offload) needs: reading such a queue
// gives TCP (TSO) and UDP (USO) super packets to cut into segments, each with headers
// of its own (TSOLayout, TCPSegmentHeaders, USOLayout, UDPSegmentHeaders); writing
// it takes runs of segments of one flow coalesced into one super packet (Run, the
// GRO of userspace). Checksums are summed with Sum and Fold. It is pure Go: bytes in,
// bytes out; the queue itself is package tun's.
package offload

import (
	"encoding/binary"
	"math/bits"
)

// VnetHdrLen is the size of the virtio-net header in front of every packet of a TUN
// queue opened with offloads (struct virtio_net_hdr, no num_buffers).
const VnetHdrLen = 10

// The flags and GSO types of a virtio-net header (linux/virtio_net.h).
const (
	// NeedsCsum (VIRTIO_NET_HDR_F_NEEDS_CSUM): the checksum at CsumStart+CsumOffset
	// holds only the pseudo-header sum; the rest is to be summed from CsumStart.
	NeedsCsum = 1
	// GSONone: a packet of its own, not a super packet.
	GSONone = 0
	// GSOTCPv4 and GSOTCPv6: a TCP super packet, to be cut into segments of GSOSize.
	GSOTCPv4 = 1
	GSOTCPv6 = 4
	// GSOUDPL4: a UDP super packet (USO), to be cut into datagrams of GSOSize.
	GSOUDPL4 = 5
	// GSOECN is or'ed to a GSO type when the TCP segments carry ECN (CWR on the first).
	GSOECN = 0x80
)

const (
	// MaxSuperPacket is the largest packet, super packets included, a queue with
	// offloads reads or takes.
	MaxSuperPacket = 65535
	// MaxSegHeaders holds the headers of one segment: IPv4 and TCP headers with every
	// option (more than IPv6 and TCP, or IPv4 or IPv6 and UDP, need).
	MaxSegHeaders = 60 + 60
)

const (
	ipv4HeaderLen = 20
	ipv6HeaderLen = 40
	udpHeaderLen  = 8
	protoTCP      = 6
	protoUDP      = 17
	tcpFlagFIN    = 0x01
	tcpFlagPSH    = 0x08
	tcpFlagACK    = 0x10
	tcpFlagCWR    = 0x80
)

// VnetHdr is a virtio-net header (struct virtio_net_hdr), in the host's byte order
// in the VnetHdrLen bytes in front of a packet.
type VnetHdr struct {
	Flags      uint8  // NeedsCsum or 0
	GSOType    uint8  // GSONone, GSOTCPv4, GSOTCPv6 or GSOUDPL4, maybe with GSOECN
	HdrLen     uint16 // length of the IP and TCP or UDP headers of a super packet
	GSOSize    uint16 // payload bytes of every segment but the last
	CsumStart  uint16 // where the checksummed part starts (with NeedsCsum)
	CsumOffset uint16 // where the checksum field is, from CsumStart
}

// ParseVnetHdr reads the virtio-net header in b (VnetHdrLen bytes at least).
func ParseVnetHdr(b []byte) VnetHdr {
	e := binary.NativeEndian
	return VnetHdr{b[0], b[1], e.Uint16(b[2:]), e.Uint16(b[4:]), e.Uint16(b[6:]), e.Uint16(b[8:])}
}

// Put writes h into b (VnetHdrLen bytes at least).
func (h VnetHdr) Put(b []byte) {
	e := binary.NativeEndian
	b[0], b[1] = h.Flags, h.GSOType
	e.PutUint16(b[2:], h.HdrLen)
	e.PutUint16(b[4:], h.GSOSize)
	e.PutUint16(b[6:], h.CsumStart)
	e.PutUint16(b[8:], h.CsumOffset)
}

// Sum adds b to the ones' complement accumulator ac (the Internet checksum of RFC
// 1071 before Fold); sums of pieces of even length chain. The grouping does not
// change the folded 16-bit sum, so the bulk goes 32 bits at a time into four 64-bit
// accumulators: no carry chain between the adds, and a 64-bit accumulator cannot
// overflow before 2^31 words. What is left goes 8 bytes at a time.
func Sum(b []byte, ac uint64) uint64 {
	be := binary.BigEndian
	var a0, a1, a2, a3 uint64
	for len(b) >= 32 {
		a0 += uint64(be.Uint32(b)) + uint64(be.Uint32(b[16:]))
		a1 += uint64(be.Uint32(b[4:])) + uint64(be.Uint32(b[20:]))
		a2 += uint64(be.Uint32(b[8:])) + uint64(be.Uint32(b[24:]))
		a3 += uint64(be.Uint32(b[12:])) + uint64(be.Uint32(b[28:]))
		b = b[32:]
	}
	var c uint64
	ac, c = bits.Add64(ac, a0, c)
	ac, c = bits.Add64(ac, a1, c)
	ac, c = bits.Add64(ac, a2, c)
	ac, c = bits.Add64(ac, a3, c)
	for len(b) >= 8 {
		ac, c = bits.Add64(ac, be.Uint64(b), c)
		b = b[8:]
	}
	var tail uint64
	for i := range b { // up to 7 bytes, placed as in a big-endian word
		tail |= uint64(b[i]) << (56 - 8*i)
	}
	ac, c = bits.Add64(ac, tail, c)
	ac, c = bits.Add64(ac, c, 0)
	return ac + c
}

// Fold folds an accumulator of Sum to 16 bits (not complemented: the checksum is
// ^Fold, and a checksummed range with its checksum folds to 0xffff).
func Fold(ac uint64) uint16 {
	ac = (ac >> 32) + (ac & 0xffffffff)
	ac = (ac >> 32) + (ac & 0xffffffff)
	ac = (ac >> 16) + (ac & 0xffff)
	ac = (ac >> 16) + (ac & 0xffff)
	ac = (ac >> 16) + (ac & 0xffff)
	return uint16(ac)
}

// Checksum is the Internet checksum of b.
func Checksum(b []byte) uint16 { return ^Fold(Sum(b, 0)) }

// FinishChecksum completes a checksum the kernel left partial (NeedsCsum): the field
// holds the pseudo-header sum; the rest is summed from h.CsumStart. It reports false
// when the offsets do not fit the packet.
func FinishChecksum(pkt []byte, h VnetHdr) bool {
	start, field := int(h.CsumStart), int(h.CsumStart)+int(h.CsumOffset)
	if field+2 > len(pkt) || start > field {
		return false
	}
	binary.BigEndian.PutUint16(pkt[field:], ^Fold(Sum(pkt[start:], 0)))
	return true
}

// TSOLayout checks a TCP super packet (IPv4, or IPv6 without extension headers: the
// kernel's TSO6 gives those) and returns its IP header length ihl and the length hl
// of its IP and TCP headers.
func TSOLayout(pkt []byte) (ihl, hl int, ok bool) {
	switch {
	case pkt[0]>>4 == 6:
		if len(pkt) < ipv6HeaderLen+20 || pkt[6] != protoTCP {
			return 0, 0, false
		}
		ihl = ipv6HeaderLen
	case pkt[0]>>4 == 4:
		ihl = int(pkt[0]&0x0f) * 4
		if ihl < ipv4HeaderLen || pkt[9] != protoTCP || len(pkt) < ihl+20 {
			return 0, 0, false
		}
	default:
		return 0, 0, false
	}
	thl := int(pkt[ihl+12]>>4) * 4
	if thl < 20 || ihl+thl > len(pkt) {
		return 0, 0, false
	}
	return ihl, ihl + thl, true
}

// TCPSegmentHeaders writes into h (hl bytes) the IP and TCP headers of segment i
// (payload seg, at byte off of the super packet's payload) of the TCP super packet
// pkt, whose layout TSOLayout gave (ihl, hl). last marks the final segment: only it
// keeps FIN and PSH, only the first keeps CWR. The TCP checksum covers seg.
func TCPSegmentHeaders(h, pkt []byte, ihl, hl, i, off int, seg []byte, last bool) {
	copy(h, pkt[:hl])
	be := binary.BigEndian
	t := h[ihl:hl]
	tcpLen := uint64(len(t) + len(seg))
	var ac uint64 // pseudo header: addresses, protocol, TCP length
	if pkt[0]>>4 == 6 {
		be.PutUint16(h[4:], uint16(tcpLen))
		ac = Sum(h[8:40], protoTCP+tcpLen)
	} else {
		be.PutUint16(h[2:], uint16(hl+len(seg)))
		be.PutUint16(h[4:], be.Uint16(pkt[4:])+uint16(i))
		be.PutUint16(h[10:], 0)
		be.PutUint16(h[10:], ^Fold(Sum(h[:ihl], 0)))
		ac = Sum(h[12:20], protoTCP+tcpLen)
	}
	be.PutUint32(t[4:], be.Uint32(pkt[ihl+4:])+uint32(off))
	fl := pkt[ihl+13]
	if !last {
		fl &^= tcpFlagFIN | tcpFlagPSH
	}
	if i > 0 {
		fl &^= tcpFlagCWR
	}
	t[13] = fl
	be.PutUint16(t[16:], 0)
	ac = Sum(t, ac)
	ac = Sum(seg, ac)
	be.PutUint16(t[16:], ^Fold(ac))
}

// USOLayout checks a UDP super packet (IPv4, or IPv6 without extension headers: the
// kernel's USO6 gives those) and returns its IP header length ihl and the length hl
// of its IP and UDP headers.
func USOLayout(pkt []byte) (ihl, hl int, ok bool) {
	if pkt[0]>>4 == 6 {
		if len(pkt) < ipv6HeaderLen+udpHeaderLen || pkt[6] != protoUDP {
			return 0, 0, false
		}
		return ipv6HeaderLen, ipv6HeaderLen + udpHeaderLen, true
	}
	ihl = int(pkt[0]&0x0f) * 4
	if pkt[0]>>4 != 4 || ihl < ipv4HeaderLen || pkt[9] != protoUDP || len(pkt) < ihl+udpHeaderLen {
		return 0, 0, false
	}
	return ihl, ihl + udpHeaderLen, true
}

// UDPSegmentHeaders writes into h (hl bytes) the IP and UDP headers of datagram i
// (payload seg) of the UDP super packet pkt, whose layout USOLayout gave (ihl, hl).
// The UDP checksum covers seg.
func UDPSegmentHeaders(h, pkt []byte, ihl, hl, i int, seg []byte) {
	copy(h, pkt[:hl])
	be := binary.BigEndian
	if pkt[0]>>4 == 6 {
		udp6SegmentHeaders(h, seg)
		return
	}
	be.PutUint16(h[2:], uint16(hl+len(seg)))
	be.PutUint16(h[4:], be.Uint16(pkt[4:])+uint16(i))
	be.PutUint16(h[10:], 0)
	be.PutUint16(h[10:], ^Fold(Sum(h[:ihl], 0)))
	u := h[ihl:hl]
	ulen := udpHeaderLen + len(seg)
	be.PutUint16(u[4:], uint16(ulen))
	be.PutUint16(u[6:], 0)
	ac := Sum(h[12:20], uint64(protoUDP)+uint64(ulen))
	ac = Sum(u, ac)
	ac = Sum(seg, ac)
	c := ^Fold(ac)
	if c == 0 {
		c = 0xffff // 0 means "no checksum" in UDP
	}
	be.PutUint16(u[6:], c)
}

// udp6SegmentHeaders completes in h (a copy of an IPv6 UDP super packet's 48 bytes of
// headers) the headers of one datagram of payload seg: payload length, UDP length,
// UDP checksum (mandatory in IPv6) over the pseudo-header, h's UDP header and seg.
func udp6SegmentHeaders(h, seg []byte) {
	be := binary.BigEndian
	ulen := udpHeaderLen + len(seg)
	be.PutUint16(h[4:], uint16(ulen))
	u := h[ipv6HeaderLen : ipv6HeaderLen+udpHeaderLen]
	be.PutUint16(u[4:], uint16(ulen))
	be.PutUint16(u[6:], 0)
	ac := Sum(h[8:40], uint64(protoUDP)+uint64(ulen))
	ac = Sum(u, ac)
	ac = Sum(seg, ac)
	c := ^Fold(ac)
	if c == 0 {
		c = 0xffff
	}
	be.PutUint16(u[6:], c)
}
