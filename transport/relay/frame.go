// Package relay is how two weftd hosts meet when WireGuard's own socket cannot carry
// them straight: one UDP socket (the path port, 51822 by default) per host that
//   - answers a hello with the address and port the hello came from, and the address
//     and port our WireGuard device sees the sender's WireGuard at: a host behind NAT
//     learns its NAT's outside mapping from a host that can see it (hello.go);
//   - forwards WireGuard datagrams from one host to another as they are, without a
//     key of theirs: a relay (node.go);
//   - carries pings, straight or through a relay, so a path is measured before it is
//     used (node.go);
//   - gives each relayed peer a loopback socket, which is that peer's endpoint on our
//     device (its stand-in): the kernel's WireGuard device sends there and is handed
//     relayed datagrams from there; wireguard-go's, on weft's transport, trades them
//     with the node in process (SetDevice, SendRelayed), the loopback address only
//     naming the peer (local.go).
//
// Frames start with the 4-byte magic "WFT1" and a type; keys are WireGuard public
// keys. Hellos and their answers carry a MAC keyed by the two hosts' static
// Curve25519 keys, so an answer cannot be forged and a registration cannot be taken
// over by someone without the private key; relayed WireGuard datagrams are
// authenticated end to end by WireGuard itself.
package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Key is a WireGuard public key.
type Key [32]byte

// IsZero reports whether k is no key.
func (k Key) IsZero() bool { return k == Key{} }

// magic opens every frame.
var magic = [4]byte{'W', 'F', 'T', '1'}

// Frame types.
const (
	tHello    byte = 1 // from, ts, mac: register with a relay, learn our outside address
	tHelloAck byte = 2 // from, ts, seen, wgSeen, mac
	tRelay    byte = 3 // to, from, payload: to a relay
	tDeliver  byte = 4 // from, flags, payload: from a relay (flagRelayed) or straight
	tNoPeer   byte = 5 // from (the relay), to, ts, mac: the relay has no registration for to
)

// flagRelayed marks a delivery that came through a relay.
const flagRelayed byte = 1

// Payloads of a delivery besides WireGuard datagrams (whose first byte is 1-4).
const (
	pPing  byte = 0x80 // id (8)
	pPong  byte = 0x81 // id (8)
	pPunch byte = 0x82 // ts (8), the sender's path socket outside (addrLen), mac: "punch now"
)

const (
	headerLen = 5
	macLen    = 16
	addrLen   = 18 // 16 bytes of address (IPv4 mapped), 2 of port
	helloLen  = headerLen + 32 + 8 + macLen
	ackLen    = headerLen + 32 + 8 + 2*addrLen + macLen
	relayHdr  = headerLen + 64
	noPeerLen = headerLen + 64 + 8 + macLen
	deliverHd = headerLen + 32 + 1
	pingLen   = 9
	punchLen  = 1 + 8 + addrLen + macLen
)

// MaxOverhead is what a relayed WireGuard datagram gains on its way: the relay frame.
const MaxOverhead = relayHdr

// ErrMalformed is a frame that is not one: too short, a wrong magic or type.
var ErrMalformed = errors.New("malformed frame")

func putHeader(b []byte, t byte) {
	copy(b, magic[:])
	b[4] = t
}

// frameType is b's type, after checking its magic and the length its type needs.
func frameType(b []byte) (byte, error) {
	if len(b) < headerLen || [4]byte(b[:4]) != magic {
		return 0, fmt.Errorf("%w: no magic", ErrMalformed)
	}
	need := 0
	switch b[4] {
	case tHello:
		need = helloLen
	case tHelloAck:
		need = ackLen
	case tRelay:
		need = relayHdr + 1
	case tDeliver:
		need = deliverHd + 1
	case tNoPeer:
		need = noPeerLen
	}
	if need == 0 {
		return 0, fmt.Errorf("%w: type %d", ErrMalformed, b[4])
	}
	if len(b) < need {
		return 0, fmt.Errorf("%w: type %d of %d bytes, want %d", ErrMalformed, b[4], len(b), need)
	}
	return b[4], nil
}

func putAddr(b []byte, ap netip.AddrPort) {
	a := ap.Addr()
	if a.Is4() {
		a = netip.AddrFrom16(a.As16())
	}
	if ap.IsValid() {
		s := a.As16()
		copy(b, s[:])
	} else {
		clear(b[:16])
	}
	binary.BigEndian.PutUint16(b[16:], ap.Port())
}

func getAddr(b []byte) netip.AddrPort {
	a := netip.AddrFrom16([16]byte(b[:16])).Unmap()
	if a.IsUnspecified() || a == netip.AddrFrom16([16]byte{}) {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[16:]))
}

// isWireGuard reports whether p looks like a WireGuard message: a type of 1-4 in a
// little-endian word whose other bytes are zero.
func isWireGuard(p []byte) bool {
	return len(p) >= 4 && p[0] >= 1 && p[0] <= 4 && p[1] == 0 && p[2] == 0 && p[3] == 0
}
