// Package wgbind gives a userspace WireGuard device (wireguard-go) weft's transport
// as its conn.Bind: datagrams go out as they are, pieces of wireguard-go's own
// buffers staged as UDP GSO runs (no copy into a send buffer), one sendmmsg per
// batch; they come in through recvmmsg with UDP GRO, each copied once into
// wireguard-go's buffer, and without an allocation per datagram.
package wgbind

import (
	"net/netip"
	"sync/atomic"

	"github.com/weftnet/weft/transport"
	"golang.zx2c4.com/wireguard/conn"
)

// Endpoint is a peer's address as the Bind sends to it, and the local address the
// peer last reached (its source, as wireguard-go's and the kernel's devices keep it:
// a reply leaves from the address the peer sent to, not the one the route would
// pick). Endpoints are immutable but for ClearSrc: the receivers hand out the same
// one for the same source and local address.
type Endpoint struct {
	ap      netip.AddrPort
	src     transport.Local
	cleared atomic.Bool // ClearSrc: the route picks the source
}

var _ conn.Endpoint = (*Endpoint)(nil)

// ClearSrc forgets the source: later sends leave from the route's.
func (e *Endpoint) ClearSrc() { e.cleared.Store(true) }

// source is the address sends leave from (zero: the route's).
func (e *Endpoint) source() transport.Local {
	if e.cleared.Load() {
		return transport.Local{}
	}
	return e.src
}

// SrcToString is the source address, empty when none is kept.
func (e *Endpoint) SrcToString() string {
	if s := e.source(); s.IsValid() {
		return s.Addr.String()
	}
	return ""
}

// DstToString is the address as wg shows it.
func (e *Endpoint) DstToString() string { return e.ap.String() }

// DstToBytes is the address as the cookie MACs take it.
func (e *Endpoint) DstToBytes() []byte {
	b, _ := e.ap.MarshalBinary()
	return b
}

// DstIP is the address.
func (e *Endpoint) DstIP() netip.Addr { return e.ap.Addr() }

// SrcIP is the source address (invalid when none is kept).
func (e *Endpoint) SrcIP() netip.Addr { return e.source().Addr }

// AddrPort is the address and port.
func (e *Endpoint) AddrPort() netip.AddrPort { return e.ap }

// endpoints hands out one Endpoint per source and local address, for one receiving
// goroutine.
type endpoints struct {
	last *Endpoint
	m    map[endpointKey]*Endpoint
}

type endpointKey struct {
	ap  netip.AddrPort
	src transport.Local
}

// maxEndpoints bounds the cache: a flood from many sources empties it rather than
// growing it.
const maxEndpoints = 4096

func (c *endpoints) get(ap netip.AddrPort, src transport.Local) *Endpoint {
	if e := c.last; e != nil && e.ap == ap && e.src == src && !e.cleared.Load() {
		return e
	}
	k := endpointKey{ap, src}
	e, ok := c.m[k]
	if !ok || e.cleared.Load() {
		if c.m == nil || len(c.m) >= maxEndpoints {
			c.m = make(map[endpointKey]*Endpoint)
		}
		e = &Endpoint{ap: ap, src: src}
		c.m[k] = e
	}
	c.last = e
	return e
}

// InitiationCounts counts what a Bind did with its device's handshake initiations
// (Linux: elsewhere the device runs on wireguard-go's own Bind).
type InitiationCounts struct {
	// Retransmitted: sent again, as they were, for want of a response.
	Retransmitted uint64 `json:"retransmitted"`
	// Resent: sent to a peer's new endpoint at once (ResendInitiation).
	Resent uint64 `json:"resent"`
	// NotKept: not kept, the table being full (16,384 endpoints handshaking within
	// 5 s), so neither retransmitted nor resent.
	NotKept uint64 `json:"not_kept"`
}
