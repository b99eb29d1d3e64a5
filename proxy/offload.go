package proxy

import (
	"encoding/binary"
	"math/bits"

	"github.com/weftnet/weft/tun"
)

// The virtio-net header in front of packets of a TUN queue with offloads
// (struct virtio_net_hdr, in the host's byte order); its size is the tun package's.
const (
	vnetHdrLen     = tun.VnetHdrLen
	vnetNeedsCsum  = 1
	vnetGSONone    = 0
	vnetGSOTCPv4   = 1
	vnetGSOTCPv6   = 4
	vnetGSOUDPL4   = 5
	vnetGSOECN     = 0x80
	tcpFlagFIN     = 0x01
	tcpFlagPSH     = 0x08
	tcpFlagCWR     = 0x80
	protoTCP       = 6
	protoUDP       = 17
	udpHeaderLen   = 8
	maxSegHeaders  = 60 + 60 // IPv4 and TCP headers with every option
	maxSuperPacket = 65535
)

type vnetHdr struct {
	flags      uint8
	gsoType    uint8
	hdrLen     uint16
	gsoSize    uint16
	csumStart  uint16
	csumOffset uint16
}

func parseVnetHdr(b []byte) vnetHdr {
	e := binary.NativeEndian
	return vnetHdr{b[0], b[1], e.Uint16(b[2:]), e.Uint16(b[4:]), e.Uint16(b[6:]), e.Uint16(b[8:])}
}

func (h vnetHdr) put(b []byte) {
	e := binary.NativeEndian
	b[0], b[1] = h.flags, h.gsoType
	e.PutUint16(b[2:], h.hdrLen)
	e.PutUint16(b[4:], h.gsoSize)
	e.PutUint16(b[6:], h.csumStart)
	e.PutUint16(b[8:], h.csumOffset)
}

// sum adds b to the ones' complement accumulator ac. The grouping does not change
// the folded 16-bit sum, so the bulk goes 32 bits at a time into four 64-bit
// accumulators: no carry chain between the adds, and a 64-bit accumulator cannot
// overflow before 2^31 words. What is left goes 8 bytes at a time.
func sum(b []byte, ac uint64) uint64 {
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

// fold folds an accumulator to 16 bits (not complemented).
func fold(ac uint64) uint16 {
	ac = (ac >> 32) + (ac & 0xffffffff)
	ac = (ac >> 32) + (ac & 0xffffffff)
	ac = (ac >> 16) + (ac & 0xffff)
	ac = (ac >> 16) + (ac & 0xffff)
	ac = (ac >> 16) + (ac & 0xffff)
	return uint16(ac)
}

// finishChecksum completes a checksum the kernel left partial (VIRTIO_NET_HDR_F_
// NEEDS_CSUM): the field holds the pseudo-header sum; the rest is summed from
// csumStart. It reports false when the offsets do not fit the packet.
func finishChecksum(pkt []byte, h vnetHdr) bool {
	start, field := int(h.csumStart), int(h.csumStart)+int(h.csumOffset)
	if field+2 > len(pkt) || start > field {
		return false
	}
	binary.BigEndian.PutUint16(pkt[field:], ^fold(sum(pkt[start:], 0)))
	return true
}

// tsoLayout checks a TCP super packet (IPv4, or IPv6 without extension headers: the
// kernel's TSO6 gives those) and returns its header lengths.
func tsoLayout(pkt []byte) (ihl, hl int, ok bool) {
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

// segmentHeaders writes into h the IP and TCP headers of segment i (payload seg, at
// byte off of the super packet's payload) of the super packet pkt, whose headers are
// hl bytes (IP header ihl: IPv4, or IPv6 when 40 bytes of version 6). last marks the
// final segment. The TCP checksum covers seg.
func segmentHeaders(h, pkt []byte, ihl, hl, i, off int, seg []byte, last bool) {
	copy(h, pkt[:hl])
	be := binary.BigEndian
	t := h[ihl:hl]
	tcpLen := uint64(len(t) + len(seg))
	var ac uint64 // pseudo header: addresses, protocol, TCP length
	if pkt[0]>>4 == 6 {
		be.PutUint16(h[4:], uint16(tcpLen))
		ac = sum(h[8:40], protoTCP+tcpLen)
	} else {
		be.PutUint16(h[2:], uint16(hl+len(seg)))
		be.PutUint16(h[4:], be.Uint16(pkt[4:])+uint16(i))
		be.PutUint16(h[10:], 0)
		be.PutUint16(h[10:], ^fold(sum(h[:ihl], 0)))
		ac = sum(h[12:20], protoTCP+tcpLen)
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
	ac = sum(t, ac)
	ac = sum(seg, ac)
	be.PutUint16(t[16:], ^fold(ac))
}

// usoLayout checks a UDP super packet (IPv4, or IPv6 without extension headers: the
// kernel's USO6 gives those) and returns its header lengths.
func usoLayout(pkt []byte) (ihl, hl int, ok bool) {
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

// segmentUDPHeaders writes into h the IPv4 and UDP headers of datagram i (payload
// seg) of the UDP super packet pkt, whose headers are hl bytes (IPv4 header ihl).
// The UDP checksum covers seg.
func segmentUDPHeaders(h, pkt []byte, ihl, hl, i int, seg []byte) {
	copy(h, pkt[:hl])
	be := binary.BigEndian
	if pkt[0]>>4 == 6 {
		segmentUDP6Headers(h, seg)
		return
	}
	be.PutUint16(h[2:], uint16(hl+len(seg)))
	be.PutUint16(h[4:], be.Uint16(pkt[4:])+uint16(i))
	be.PutUint16(h[10:], 0)
	be.PutUint16(h[10:], ^fold(sum(h[:ihl], 0)))
	u := h[ihl:hl]
	ulen := udpHeaderLen + len(seg)
	be.PutUint16(u[4:], uint16(ulen))
	be.PutUint16(u[6:], 0)
	ac := sum(h[12:20], uint64(protoUDP)+uint64(ulen))
	ac = sum(u, ac)
	ac = sum(seg, ac)
	c := ^fold(ac)
	if c == 0 {
		c = 0xffff // 0 means "no checksum" in UDP
	}
	be.PutUint16(u[6:], c)
}

// segmentUDP6Headers completes in h (a copy of an IPv6 UDP super packet's 48 bytes of
// headers) the headers of one datagram of payload seg: payload length, UDP length,
// UDP checksum (mandatory in IPv6) over the pseudo-header, h's UDP header and seg.
func segmentUDP6Headers(h, seg []byte) {
	be := binary.BigEndian
	ulen := udpHeaderLen + len(seg)
	be.PutUint16(h[4:], uint16(ulen))
	u := h[ipv6HeaderLen : ipv6HeaderLen+udpHeaderLen]
	be.PutUint16(u[4:], uint16(ulen))
	be.PutUint16(u[6:], 0)
	ac := sum(h[8:40], uint64(protoUDP)+uint64(ulen))
	ac = sum(u, ac)
	ac = sum(seg, ac)
	c := ^fold(ac)
	if c == 0 {
		c = 0xffff
	}
	be.PutUint16(u[6:], c)
}
