package relay

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// local is the loopback socket that stands for one relayed peer on our WireGuard
// device: the device's endpoint for the peer is this socket's address, so what the
// device sends the peer arrives here and goes on to the relay, and what the relay
// brings from the peer is sent to the device from here (the device then takes this
// address as the peer's endpoint, as WireGuard takes any authenticated source).
type local struct {
	conn *net.UDPConn
	addr netip.AddrPort
}

// localLocked is peer k's loopback socket, opened (and its reader started) the
// first time. n.mu is held.
func (n *Node) localLocked(k Key) (*local, error) {
	if l, ok := n.locals[k]; ok {
		return l, nil
	}
	if n.closed {
		return nil, net.ErrClosed
	}
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("relay: loopback socket: %w", err)
	}
	setBuffers(conn, socketBuffer)
	ap := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	l := &local{conn: conn, addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}
	n.locals[k] = l
	go n.readLocal(k, l)
	return l, nil
}

// Endpoint is the address our WireGuard device should send peer k's datagrams to
// when they go through a relay (SetRoute says which).
func (n *Node) Endpoint(k Key) (netip.AddrPort, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, err := n.localLocked(k)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return l.addr, nil
}

// IsEndpoint reports whether ep is one of our loopback sockets, and whose.
func (n *Node) IsEndpoint(ep netip.AddrPort) (Key, bool) {
	if !ep.Addr().IsLoopback() {
		return Key{}, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, l := range n.locals {
		if l.addr == ep {
			return k, true
		}
	}
	return Key{}, false
}

// SetRoute sends the datagrams our device sends peer k through the relay at via
// (invalid: back through the relay they last came by).
func (n *Node) SetRoute(k Key, via netip.AddrPort) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if via.IsValid() {
		n.routes[k] = via
	} else {
		delete(n.routes, k)
	}
}

// Route is the relay peer k's datagrams go through now: the one SetRoute set, else
// the one they last came by.
func (n *Node) Route(k Key) netip.AddrPort {
	n.mu.Lock()
	defer n.mu.Unlock()
	if r, ok := n.routes[k]; ok {
		return r
	}
	return n.heard[k]
}

// readLocal carries what the device sends to peer k's loopback socket to the relay,
// until the socket is closed. The frame is built in front of the datagram, in one
// buffer allocated once.
func (n *Node) readLocal(k Key, l *local) {
	buf := make([]byte, maxFrame)
	putHeader(buf, tRelay)
	copy(buf[5:], k[:])
	copy(buf[37:], n.pub[:])
	for {
		size, from, err := l.conn.ReadFromUDPAddrPort(buf[relayHdr:])
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if from.Port() != n.wg.Port() || !from.Addr().Unmap().IsLoopback() {
			n.dropped.Add(1) // only our device speaks to this socket
			continue
		}
		via := n.Route(k)
		if !via.IsValid() {
			n.dropped.Add(1)
			continue
		}
		_ = n.send(buf[:relayHdr+size], via)
	}
}

func (l *local) close() error { return l.conn.Close() }
