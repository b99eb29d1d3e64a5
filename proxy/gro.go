package proxy

import (
	"bytes"
	"encoding/binary"
)

// Ingress coalescing (GRO in userspace): when the TUN queue has offloads, runs of
// in-order segments of one TCP flow in a receive batch are written as one super
// packet with a virtio-net header (GSO TCPv4, checksum partial), so the kernel and the
// receiving socket handle one packet instead of dozens. With UDP segmentation offload
// on the queue (USO), runs of same-sized datagrams of one UDP flow are written the
// same way (GSO UDP_L4): one TUN write for up to groMaxUDPSegs datagrams; the kernel
// cuts them apart again (or hands them whole to a socket with UDP GRO).

const (
	tcpFlagACK = 0x10
	groMaxLen  = maxSuperPacket
	// groMaxUDPSegs is the most datagrams in one UDP super packet (the kernel's own
	// UDP GRO stops at 64 too).
	groMaxUDPSegs = 64
)

// groRun is the run being coalesced: its first packet and what the next must match.
type groRun struct {
	first   []byte // first packet (in its receive buffer)
	hl      int    // IPv4 + TCP header length of the run
	segSize int    // payload size of every segment but the last
	nextSeq uint32
	total   int // bytes of the run (headers once + payloads)
	count   int
	buf     []byte // the coalescing buffer once count > 1 (Headroom + packet)
	closed  bool   // a short or PSH segment ended it
	udp     bool   // a run of UDP datagrams (else TCP segments)
}

// groCandidate reports whether pkt (a checked IPv4 packet) may start or join a run:
// TCP with a payload, no IP options, not fragmented, flags ACK (and PSH); with uso
// also UDP with a payload, no IP options, not fragmented, its length field matching.
func groCandidate(pkt []byte, uso bool) (hl int, udp, ok bool) {
	if pkt[0] != 0x45 || binary.BigEndian.Uint16(pkt[6:8])&0x3fff != 0 {
		return 0, false, false
	}
	switch pkt[9] {
	case protoTCP:
		if len(pkt) < 40 {
			return 0, false, false
		}
		hl = 20 + int(pkt[32]>>4)*4
		if hl < 40 || hl >= len(pkt) || pkt[33]&^tcpFlagPSH != tcpFlagACK {
			return 0, false, false
		}
		return hl, false, true
	case protoUDP:
		hl = 20 + udpHeaderLen
		if !uso || len(pkt) <= hl || int(binary.BigEndian.Uint16(pkt[24:26])) != len(pkt)-20 {
			return 0, false, false
		}
		return hl, true, true
	}
	return 0, false, false
}

// groJoins reports whether pkt (of kind udp) continues run r.
func groJoins(r *groRun, pkt []byte, hl int, udp bool) bool {
	f := r.first
	if r.closed || udp != r.udp || hl != r.hl || r.total+len(pkt)-hl > groMaxLen || len(pkt)-hl > r.segSize {
		return false
	}
	if udp {
		// Same TOS, DF, TTL, addresses and ports.
		return r.count < groMaxUDPSegs && pkt[1] == f[1] && pkt[6] == f[6] && pkt[8] == f[8] &&
			bytes.Equal(pkt[12:24], f[12:24])
	}
	// Same TOS, DF, TTL, protocol, addresses; same ports; same ack and window; same
	// options (timestamps included), and in sequence.
	if pkt[1] != f[1] || pkt[6] != f[6] || pkt[8] != f[8] || !bytes.Equal(pkt[12:24], f[12:24]) ||
		!bytes.Equal(pkt[28:32], f[28:32]) || !bytes.Equal(pkt[34:36], f[34:36]) ||
		!bytes.Equal(pkt[40:hl], f[40:hl]) || binary.BigEndian.Uint32(pkt[24:28]) != r.nextSeq {
		return false
	}
	return true
}

// groStart makes pkt (of kind udp) the first packet of a run.
func groStart(r *groRun, pkt []byte, hl int, udp bool) {
	*r = groRun{first: pkt, hl: hl, segSize: len(pkt) - hl, total: len(pkt), count: 1, udp: udp}
	if !udp {
		r.nextSeq = binary.BigEndian.Uint32(pkt[24:28]) + uint32(len(pkt)-hl)
		r.closed = pkt[33]&tcpFlagPSH != 0
	}
}

// groAppend adds pkt's payload to the run, copying the first packet into buf (which
// must hold Headroom+groMaxLen bytes) when the run first grows.
func groAppend(r *groRun, pkt []byte, buf []byte) {
	if r.count == 1 {
		r.buf = buf
		copy(buf[Headroom:], r.first)
	}
	copy(r.buf[Headroom+r.total:], pkt[r.hl:])
	r.total += len(pkt) - r.hl
	r.count++
	if r.udp {
		r.closed = len(pkt)-r.hl < r.segSize
		return
	}
	r.nextSeq += uint32(len(pkt) - r.hl)
	if len(pkt)-r.hl < r.segSize || pkt[33]&tcpFlagPSH != 0 {
		r.buf[Headroom+33] |= pkt[33] & tcpFlagPSH
		r.closed = true
	}
}

// groFinish writes the headers of a run of two or more packets (lengths, IPv4
// checksum, partial TCP checksum) and its virtio-net header, and returns the buffer
// to write (from 0, packet at Headroom).
func groFinish(r *groRun) []byte {
	be := binary.BigEndian
	p := r.buf[Headroom : Headroom+r.total]
	be.PutUint16(p[2:], uint16(r.total))
	be.PutUint16(p[10:], 0)
	be.PutUint16(p[10:], ^fold(sum(p[:20], 0)))
	if r.udp {
		// The UDP length and the partial checksum are the whole run's; the kernel
		// gives each datagram its own when it cuts them apart.
		be.PutUint16(p[24:], uint16(r.total-20))
		be.PutUint16(p[26:], fold(sum(p[12:20], uint64(protoUDP)+uint64(r.total-20))))
		vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOUDPL4, hdrLen: uint16(r.hl), gsoSize: uint16(r.segSize),
			csumStart: 20, csumOffset: 6}.put(r.buf[Headroom-vnetHdrLen : Headroom])
		return r.buf[:Headroom+r.total]
	}
	// Checksum partial: the field holds the pseudo-header sum, the kernel finishes it
	// (or trusts it, for local delivery).
	be.PutUint16(p[36:], fold(sum(p[12:20], uint64(protoTCP)+uint64(r.total-20))))
	vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOTCPv4, hdrLen: uint16(r.hl), gsoSize: uint16(r.segSize),
		csumStart: 20, csumOffset: 16}.put(r.buf[Headroom-vnetHdrLen : Headroom])
	return r.buf[:Headroom+r.total]
}
