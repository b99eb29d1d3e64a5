// Package transport is weft's batched UDP I/O, shared by its userspace engines: the
// udp backend's workers (proxy/), the WireGuard device's Bind (encap/wireguard) and
// the relay (transport/relay). A Conn is one UDP socket with its send and receive
// vectors allocated once: a caller stages messages (each one datagram, or a run of
// datagrams for UDP GSO, built from pieces of its own buffers without copying them),
// sends them with one sendmmsg, and receives batches with one recvmmsg, UDP GRO
// packing many datagrams of one size into one message where the kernel can.
//
// One goroutine sends and one receives on a Conn; they share only what Listen set.
package transport

import (
	"errors"
	"net/netip"
	"os"
)

// Options are a socket's features; each can be switched off.
type Options struct {
	// Addr is the local address (zero: every address of the family).
	Addr netip.Addr
	// Port is the local port (0: the kernel picks one).
	Port int
	// ReusePort sets SO_REUSEPORT, so that several Conns (one per queue) share Port.
	ReusePort bool
	// SocketBuffer is the receive and send buffer size in bytes, forced past the
	// sysctl limits where the process may; <= 0 keeps the kernel's default.
	SocketBuffer int
	// Mmsg uses sendmmsg/recvmmsg; without it (or where the kernel lacks them) each
	// datagram is one sendmsg/recvmsg.
	Mmsg bool
	// GSO tries UDP_SEGMENT (a run of datagrams crosses the stack as one).
	GSO bool
	// GRO tries UDP_GRO: a received message may hold many datagrams of one size.
	GRO bool
	// IPv6 makes an IPv6 socket (IPV6_V6ONLY) instead of an IPv4 one.
	IPv6 bool
	// DualStack makes one socket for both families where the host has IPv6 (an IPv6
	// socket without IPV6_V6ONLY; Addr must be zero): IPv4 peers are given and
	// reported as plain IPv4 addresses. Without IPv6 it is an IPv4 socket.
	DualStack bool
	// Messages and Iovecs are the send side's room: messages per send, and pieces
	// (iovecs) over all of them.
	Messages, Iovecs int
	// LocalAddrs reports, for every received message, the local address it came to
	// and the interface it came in on (Local): IP_PKTINFO, IPV6_RECVPKTINFO. Not with
	// DualStack. Any socket may name a message's source (BeginFrom, StageRunFrom).
	LocalAddrs bool
	// From is a socket to go on with instead of opening one: an earlier weftd's,
	// passed on in a hand-over (Conn.File), with what waits in it. It must be UDP,
	// bound to Port (and Addr, when set) in the family the options ask for; Listen
	// fails with ErrSocket otherwise. Listen takes a copy: the caller closes From.
	From *os.File
}

// Local is a local address and the interface it is on: where a datagram came in, or
// the source a message leaves from. The zero Local is none (the route picks).
type Local struct {
	Addr    netip.Addr
	Ifindex int
}

// IsValid reports whether l names an address.
func (l Local) IsValid() bool { return l.Addr.IsValid() }

// ErrSocket is returned by Listen for an Options.From that is not the socket the
// options describe.
var ErrSocket = errors.New("not the socket asked for")

// ErrFamily is returned for a destination of the other address family than the
// socket's.
var ErrFamily = errors.New("transport: address of the other family")

// ErrOption is returned by Listen for options that do not go together.
var ErrOption = errors.New("transport: options do not go together")

// UDP GSO limits: datagrams per message (UDP_MAX_SEGMENTS on older kernels) and the
// largest UDP payload of one message.
const (
	MaxSegments   = 64
	MaxUDPPayload = 65535 - 20 - 8
)

// cacheLine separates what the sending and the receiving goroutine write.
const cacheLine = 64
