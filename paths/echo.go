package paths

import (
	"encoding/binary"
	"errors"
)

// ICMP echo types by family: request, reply.
var echoTypes = [2][2]byte{{8, 0}, {128, 129}}

// Header sizes: IPv4 (no options), IPv6, ICMP echo.
const (
	ip4Header   = 20
	ip6Header   = 40
	echoHeader  = 8
	maxProbeLen = 1<<16 - 1
)

// errShortEcho is returned for an ICMP message too short to be an echo.
var errShortEcho = errors.New("short ICMP echo")

// ipHeader is the IP header length of family fam (0: IPv4, 1: IPv6).
func ipHeader(fam int) int {
	if fam == 1 {
		return ip6Header
	}
	return ip4Header
}

// putEcho writes into b an echo request of family fam whose IP packet is size bytes,
// carrying p, and returns the ICMP message. b must hold size bytes; size must leave
// room for p (see minProbe). IPv4's checksum is computed here, IPv6's by the kernel.
func putEcho(b []byte, fam int, id uint16, p probe, size int) []byte {
	m := b[:size-ipHeader(fam)]
	clear(m)
	m[0] = echoTypes[fam][0]
	binary.BigEndian.PutUint16(m[4:], id)
	binary.BigEndian.PutUint16(m[6:], p.round)
	p.put(m[echoHeader:])
	if fam == 0 {
		binary.BigEndian.PutUint16(m[2:], checksum(m))
	}
	return m
}

// minProbe is the smallest IP packet of family fam a probe fits in.
func minProbe(fam int) int { return ipHeader(fam) + echoHeader + probeDataLen }

// parseEchoReply returns the id and data of an ICMP echo reply of family fam.
func parseEchoReply(m []byte, fam int) (id uint16, data []byte, err error) {
	if len(m) < echoHeader || m[0] != echoTypes[fam][1] || m[1] != 0 {
		return 0, nil, errShortEcho
	}
	return binary.BigEndian.Uint16(m[4:]), m[echoHeader:], nil
}

// checksum is the Internet checksum of b (RFC 1071).
func checksum(b []byte) uint16 {
	var s uint32
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
