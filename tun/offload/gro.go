package offload

import (
	"bytes"
	"encoding/binary"
)

// Coalescing (GRO in userspace), for writes to a TUN queue with offloads: runs of
// in-order segments of one TCP flow in a batch are written as one super packet with a
// virtio-net header (GSO TCPv4 or TCPv6, checksum partial), so the kernel and the
// receiving socket handle one packet instead of dozens. With UDP segmentation offload
// on the queue (USO), runs of same-sized datagrams of one UDP flow are written the
// same way (GSO UDP_L4): one TUN write for up to MaxRunSegments datagrams; the kernel
// cuts them apart again (or hands them whole to a socket with UDP GRO).

const (
	// MaxRunSegments is the most segments or datagrams in one run (the kernel's own
	// GRO stops at 64 too); it also bounds the pieces of one TUN write.
	MaxRunSegments = 64
	// RunHdrLen holds a run's headers (Run.Append): virtio-net, IPv6 (the longer IP
	// header) and a TCP header with the most options.
	RunHdrLen = VnetHdrLen + ipv6HeaderLen + 60
	// maxRunLen is the most bytes of a run (headers once and payloads).
	maxRunLen = MaxSuperPacket
)

// Run is a run of packets being coalesced: its first packet and what the next must
// match. Once it holds two packets, its header buffer holds its headers (virtio-net
// header, then the first packet's headers) and the payloads stay where the caller has
// them: a TUN write can gather them (writev), nothing is copied. The zero Run is
// empty; Start begins one.
type Run struct {
	first   []byte // first packet (in its receive buffer)
	ihl     int    // IP header length: 20 (IPv4) or 40 (IPv6)
	hl      int    // IP + TCP (or UDP) header length of the run
	segSize int    // payload size of every segment but the last
	nextSeq uint32
	total   int // bytes of the run (headers once + payloads)
	count   int
	hdr     []byte // once count > 1: virtio-net header + the run's headers
	closed  bool   // a short or PSH segment ended it, or it is full
	udp     bool   // a run of UDP datagrams (else TCP segments)
}

// Coalescable reports whether pkt (a checked IPv4 or IPv6 packet) may start or join a
// run, and returns the length hl of its IP and TCP or UDP headers and whether it is
// UDP: TCP with a payload, no IP options or extension headers, not fragmented, flags
// ACK (and PSH); with uso (the queue has USO) also UDP with a payload, its length
// field matching.
func Coalescable(pkt []byte, uso bool) (hl int, udp, ok bool) {
	if pkt[0]>>4 == 6 {
		return coalescable6(pkt, uso)
	}
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

// coalescable6 is Coalescable for IPv6 (no extension headers: the next header is
// TCP or UDP).
func coalescable6(pkt []byte, uso bool) (hl int, udp, ok bool) {
	const ihl = ipv6HeaderLen
	switch pkt[6] {
	case protoTCP:
		if len(pkt) < ihl+20 {
			return 0, false, false
		}
		hl = ihl + int(pkt[ihl+12]>>4)*4
		if hl < ihl+20 || hl >= len(pkt) || pkt[ihl+13]&^tcpFlagPSH != tcpFlagACK {
			return 0, false, false
		}
		return hl, false, true
	case protoUDP:
		hl = ihl + udpHeaderLen
		if !uso || len(pkt) <= hl || int(binary.BigEndian.Uint16(pkt[ihl+4:ihl+6])) != len(pkt)-ihl {
			return 0, false, false
		}
		return hl, true, true
	}
	return 0, false, false
}

// Joins reports whether pkt (hl and udp as Coalescable gave them) continues the run.
func (r *Run) Joins(pkt []byte, hl int, udp bool) bool {
	f := r.first
	if r.closed || udp != r.udp || hl != r.hl || pkt[0]>>4 != f[0]>>4 || r.total+len(pkt)-hl > maxRunLen || len(pkt)-hl > r.segSize {
		return false
	}
	if r.ihl == ipv6HeaderLen {
		return r.joins6(pkt, hl, udp)
	}
	if udp {
		// Same TOS, DF, TTL, addresses and ports.
		return pkt[1] == f[1] && pkt[6] == f[6] && pkt[8] == f[8] &&
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

// joins6 is Joins for IPv6: same version, traffic class and flow label, next header,
// hop limit, addresses and ports; for TCP the same ack, window and options, and in
// sequence.
func (r *Run) joins6(pkt []byte, hl int, udp bool) bool {
	f := r.first
	if !bytes.Equal(pkt[0:4], f[0:4]) || pkt[6] != f[6] || pkt[7] != f[7] || !bytes.Equal(pkt[8:44], f[8:44]) {
		return false
	}
	if udp {
		return true
	}
	return bytes.Equal(pkt[48:52], f[48:52]) && bytes.Equal(pkt[54:56], f[54:56]) &&
		bytes.Equal(pkt[60:hl], f[60:hl]) && binary.BigEndian.Uint32(pkt[44:48]) == r.nextSeq
}

// Start makes pkt (hl and udp as Coalescable gave them) the first packet of the run,
// in place of what the run held.
func (r *Run) Start(pkt []byte, hl int, udp bool) {
	ihl := ipv4HeaderLen
	if pkt[0]>>4 == 6 {
		ihl = ipv6HeaderLen
	}
	*r = Run{first: pkt, ihl: ihl, hl: hl, segSize: len(pkt) - hl, total: len(pkt), count: 1, udp: udp}
	if !udp {
		r.nextSeq = binary.BigEndian.Uint32(pkt[ihl+4:]) + uint32(len(pkt)-hl)
		r.closed = pkt[ihl+13]&tcpFlagPSH != 0
	}
}

// Append adds pkt, which Joins the run, to it. When the run first grows (its second
// packet), hdr (VnetHdrLen plus the run's header length bytes, at most RunHdrLen)
// receives the first packet's headers; later calls take nil. The caller keeps the
// payloads: the run's packet is hdr, then each packet's bytes after its headers.
func (r *Run) Append(pkt []byte, hdr []byte) {
	if r.count == 1 {
		r.hdr = hdr
		copy(hdr[VnetHdrLen:], r.first[:r.hl])
	}
	r.total += len(pkt) - r.hl
	r.count++
	if r.udp {
		r.closed = len(pkt)-r.hl < r.segSize || r.count == MaxRunSegments
		return
	}
	r.nextSeq += uint32(len(pkt) - r.hl)
	fl := r.ihl + 13
	if len(pkt)-r.hl < r.segSize || pkt[fl]&tcpFlagPSH != 0 {
		r.hdr[VnetHdrLen+fl] |= pkt[fl] & tcpFlagPSH
		r.closed = true
	}
	if r.count == MaxRunSegments {
		r.closed = true
	}
}

// Count is how many packets the run holds.
func (r *Run) Count() int { return r.count }

// First is the run's first packet.
func (r *Run) First() []byte { return r.first }

// Finish writes the headers of a run of two or more packets (lengths, IPv4 checksum,
// partial TCP or UDP checksum) and its virtio-net header into the header buffer that
// Append was given.
func (r *Run) Finish() {
	if r.ihl == ipv6HeaderLen {
		r.finish6()
		return
	}
	be := binary.BigEndian
	p := r.hdr[VnetHdrLen:]
	be.PutUint16(p[2:], uint16(r.total))
	be.PutUint16(p[10:], 0)
	be.PutUint16(p[10:], ^Fold(Sum(p[:20], 0)))
	if r.udp {
		// The UDP length and the partial checksum are the whole run's; the kernel
		// gives each datagram its own when it cuts them apart.
		be.PutUint16(p[24:], uint16(r.total-20))
		be.PutUint16(p[26:], Fold(Sum(p[12:20], uint64(protoUDP)+uint64(r.total-20))))
		VnetHdr{Flags: NeedsCsum, GSOType: GSOUDPL4, HdrLen: uint16(r.hl), GSOSize: uint16(r.segSize),
			CsumStart: 20, CsumOffset: 6}.Put(r.hdr)
		return
	}
	// Checksum partial: the field holds the pseudo-header sum, the kernel finishes it
	// (or trusts it, for local delivery).
	be.PutUint16(p[36:], Fold(Sum(p[12:20], uint64(protoTCP)+uint64(r.total-20))))
	VnetHdr{Flags: NeedsCsum, GSOType: GSOTCPv4, HdrLen: uint16(r.hl), GSOSize: uint16(r.segSize),
		CsumStart: 20, CsumOffset: 16}.Put(r.hdr)
}

// finish6 is Finish for IPv6: payload length, the partial TCP or UDP checksum over the
// IPv6 pseudo header, GSO type TCPv6 or UDP_L4.
func (r *Run) finish6() {
	be := binary.BigEndian
	const ihl = ipv6HeaderLen
	p := r.hdr[VnetHdrLen:]
	plen := r.total - ihl
	be.PutUint16(p[4:], uint16(plen))
	h := VnetHdr{Flags: NeedsCsum, GSOType: GSOTCPv6, HdrLen: uint16(r.hl), GSOSize: uint16(r.segSize),
		CsumStart: ihl, CsumOffset: 16}
	proto := uint64(protoTCP)
	if r.udp {
		be.PutUint16(p[ihl+4:], uint16(plen))
		h.GSOType, h.CsumOffset, proto = GSOUDPL4, 6, protoUDP
	}
	be.PutUint16(p[ihl+int(h.CsumOffset):], Fold(Sum(p[8:40], proto+uint64(plen))))
	h.Put(r.hdr)
}
