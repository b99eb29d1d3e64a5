package wgbind

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Relay carries the device's datagrams to the peers it relays: on the device, each
// such peer's endpoint is a loopback address that stands for it (the relay's
// stand-in), and a Bind with a Relay hands what the device sends there to the relay
// in process, not through a loopback socket.
type Relay interface {
	// SendRelayed sends bufs, the device's datagrams for the peer whose stand-in is
	// to; ok is false, and nothing sent, when to stands for no peer.
	SendRelayed(bufs [][]byte, to netip.AddrPort) (ok bool, err error)
}

// relayedQueueLen is how many relayed datagrams wait for the device at most: a
// relay batch is 32, the device takes up to 128 per call.
const relayedQueueLen = 1024

// relayedBufLen is a queued datagram's buffer: room for any WireGuard datagram of
// an underlay MTU up to 9000 without growing.
const relayedBufLen = 9216

// relayed is the queue of datagrams the relay brought for the device, read by one
// receive function of the device's.
type relayed struct {
	ch      chan relayedDatagram
	done    chan struct{}
	once    sync.Once
	pool    sync.Pool
	dropped *atomic.Uint64 // the Bind's relayDrops
}

type relayedDatagram struct {
	b    *[]byte
	from netip.AddrPort
}

func newRelayed(dropped *atomic.Uint64) *relayed {
	q := &relayed{ch: make(chan relayedDatagram, relayedQueueLen), done: make(chan struct{}), dropped: dropped}
	q.pool.New = func() any { b := make([]byte, relayedBufLen); return &b }
	return q
}

// put queues a copy of p, from the stand-in address from; false when the queue is
// full or closed (the caller counts that drop; dropped counts those take drops).
func (q *relayed) put(p []byte, from netip.AddrPort) bool {
	select {
	case <-q.done:
		return false
	default:
	}
	b := q.pool.Get().(*[]byte)
	if cap(*b) < len(p) {
		nb := make([]byte, len(p))
		b = &nb
	}
	*b = (*b)[:copy((*b)[:cap(*b)], p)]
	select {
	case q.ch <- relayedDatagram{b, from}:
		return true
	default:
		q.pool.Put(b)
		return false
	}
}

// take fills packets with queued datagrams: it waits for the first, then takes what
// else is queued, up to len(packets). It returns net.ErrClosed once closed.
func (q *relayed) take(packets [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	var d relayedDatagram
	select {
	case d = <-q.ch:
	case <-q.done:
		return 0, net.ErrClosed
	}
	k := 0
	for {
		if len(*d.b) <= len(packets[k]) {
			sizes[k] = copy(packets[k], *d.b)
			from[k] = d.from
			k++
		} else {
			q.dropped.Add(1) // larger than the device's buffers: not a datagram it could take
		}
		q.pool.Put(d.b)
		if k == len(packets) {
			return k, nil
		}
		select {
		case d = <-q.ch:
		default:
			return k, nil
		}
	}
}

// close ends take, now and for good.
func (q *relayed) close() { q.once.Do(func() { close(q.done) }) }
