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
	// head is the relay frame's header for this peer's datagrams (to it, from us),
	// sent in front of each: SendRelayed gathers it and the datagram into one.
	head [relayHdr]byte
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
	putHeader(l.head[:], tRelay)
	copy(l.head[5:], k[:])
	copy(l.head[37:], n.pub[:])
	n.locals[k] = l
	n.standIns[l.addr] = k
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
	k, ok := n.standIns[ep]
	return k, ok
}

// PeerOf is the peer whose loopback address ep is (transport/wgbind.RelayPeers). It
// answers after Close too, for the addresses the node had: a userspace device
// handing over goes on after the node, and names its relayed peers by key to the
// new weftd's.
func (n *Node) PeerOf(ep netip.AddrPort) ([32]byte, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k, ok := n.standIns[ep]
	return k, ok
}

// StandIn is peer k's loopback address, when it has one (transport/wgbind.RelayPeers).
// It answers after Close too, as PeerOf does.
func (n *Node) StandIn(k [32]byte) (netip.AddrPort, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l, ok := n.locals[Key(k)]; ok {
		return l.addr, true
	}
	if n.closed { // the locals are gone, their addresses kept
		for ap, pk := range n.standIns {
			if pk == Key(k) {
				return ap, true
			}
		}
	}
	return netip.AddrPort{}, false
}

// SendRelayed sends bufs, datagrams of our device for the peer whose loopback
// socket is at to, through that peer's relay, without the loopback leg: each goes
// as the peer's frame header and the datagram, gathered (neither copied), in runs
// of one size (UDP GSO), all in one sendmmsg where they fit. It reports false,
// sending nothing, when to is no peer's loopback socket (transport/wgbind.Relay).
func (n *Node) SendRelayed(bufs [][]byte, to netip.AddrPort) (bool, error) {
	n.mu.Lock()
	k, ok := n.standIns[to]
	l := n.locals[k]
	via, routed := n.routes[k]
	if !routed {
		via = n.heard[k]
	}
	n.mu.Unlock()
	if !ok || l == nil {
		return false, nil
	}
	if !via.IsValid() {
		n.dropped.Add(uint64(len(bufs)))
		return true, fmt.Errorf("relay: no relay for peer %x", k[:4])
	}
	n.sendMu.Lock()
	defer n.sendMu.Unlock()
	var err error
	for _, p := range bufs {
		if len(p) == 0 || len(p)+relayHdr > maxFrame {
			n.dropped.Add(1)
			continue
		}
		if !n.conn.Room(2) {
			n.sendLocked()
		}
		if serr := n.conn.StageRunParts(l.head[:], p, via); serr != nil {
			n.dropped.Add(1)
			err = serr
		}
	}
	n.sendLocked()
	return true, err
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
