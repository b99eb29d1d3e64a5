// Package wgbind gives a userspace WireGuard device (wireguard-go) weft's transport
// as its conn.Bind: datagrams go out as they are, pieces of wireguard-go's own
// buffers staged as UDP GSO runs (no copy into a send buffer), one sendmmsg per
// batch; they come in through recvmmsg with UDP GRO, each copied once into
// wireguard-go's buffer, and without an allocation per datagram.
package wgbind

import (
	"net/netip"

	"golang.zx2c4.com/wireguard/conn"
)

// Endpoint is a peer's address as the Bind sends to it. Endpoints are immutable:
// the receivers hand out the same one for the same source.
type Endpoint struct{ ap netip.AddrPort }

var _ conn.Endpoint = (*Endpoint)(nil)

// ClearSrc does nothing: the Bind picks no source address (the kernel's route does).
func (*Endpoint) ClearSrc() {}

// SrcToString is empty: no source address is kept.
func (*Endpoint) SrcToString() string { return "" }

// DstToString is the address as wg shows it.
func (e *Endpoint) DstToString() string { return e.ap.String() }

// DstToBytes is the address as the cookie MACs take it.
func (e *Endpoint) DstToBytes() []byte {
	b, _ := e.ap.MarshalBinary()
	return b
}

// DstIP is the address.
func (e *Endpoint) DstIP() netip.Addr { return e.ap.Addr() }

// SrcIP is not kept.
func (*Endpoint) SrcIP() netip.Addr { return netip.Addr{} }

// AddrPort is the address and port.
func (e *Endpoint) AddrPort() netip.AddrPort { return e.ap }

// endpoints hands out one Endpoint per source, for one receiving goroutine.
type endpoints struct {
	last *Endpoint
	m    map[netip.AddrPort]*Endpoint
}

// maxEndpoints bounds the cache: a flood from many sources empties it rather than
// growing it.
const maxEndpoints = 4096

func (c *endpoints) get(ap netip.AddrPort) *Endpoint {
	if c.last != nil && c.last.ap == ap {
		return c.last
	}
	e, ok := c.m[ap]
	if !ok {
		if c.m == nil || len(c.m) >= maxEndpoints {
			c.m = make(map[netip.AddrPort]*Endpoint)
		}
		e = &Endpoint{ap: ap}
		c.m[ap] = e
	}
	c.last = e
	return e
}
