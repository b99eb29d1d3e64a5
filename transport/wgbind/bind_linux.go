package wgbind

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/weftnet/weft/transport"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
)

// Sizes of the Bind's sockets and batches.
const (
	// SocketBuffer is what each socket asks for to send and receive, as wireguard-go's
	// own Bind does.
	SocketBuffer = 7 << 20
	// batch is how many datagrams wireguard-go hands over or takes per call.
	batch = conn.IdealBatchSize
	// recvMsgs are the receive buffers of a socket, each room for one GRO message.
	recvMsgs = 16
	bufLen   = 1 << 16
)

// Bind is a conn.Bind on two transport.Conns, one per family, on one port.
type Bind struct {
	log      *zap.Logger
	replayed *atomic.Uint64 // transport messages the device will drop as replays

	mu     sync.Mutex // Open, Close, SetMark and which sockets are open
	v4, v6 *sender

	// The relayed peers' leg (TakeRelayed): what the device sends to a stand-in
	// address goes to relay; what the relay brings waits in queue for the device.
	takeRelayed bool
	relay       atomic.Pointer[relayRef]
	queue       atomic.Pointer[relayed]
	// relayDrops counts relayed datagrams the device could not take: the queue full
	// or closed, or a datagram too large for its buffers.
	relayDrops *atomic.Uint64

	inits initiations // ResendInitiation's and the retransmits'
	// stopRetransmits ends the retransmits of an open Bind (b.mu).
	stopRetransmits func()

	// own are our device's session indices, ho a hand-over to or from another
	// device on our port (handoff_linux.go).
	own ownIndices
	ho  handOver
}

type relayRef struct{ Relay }

var _ conn.Bind = (*Bind)(nil)

// New makes a Bind; Open opens its sockets. It counts in replayed the transport
// messages the device will drop as replays (nil: not counted).
func New(log *zap.Logger, replayed *atomic.Uint64) *Bind {
	b := &Bind{log: log, replayed: replayed, relayDrops: new(atomic.Uint64)}
	b.ho.closed = make(chan struct{})
	return b
}

// sender is one socket's send side: wireguard-go sends from many goroutines (one per
// peer, and its handshakes), the socket's staging is one goroutine's.
type sender struct {
	mu sync.Mutex
	c  *transport.Conn
}

// receiver is one socket's receive side, run by one wireguard-go goroutine: what is
// left of the last batch (a GRO message holds more datagrams than a call takes).
type receiver struct {
	c        *transport.Conn
	bufs     [][]byte
	n        int // messages in the batch
	msg, off int // the next datagram: in message msg at offset off
	eps      endpoints
	replays  *replays // nil: not counted
	inits    *initiations
	log      *zap.Logger
	b        *Bind
	hdr      [frameHeader]byte // a frame to a hand-over's partner
}

// TakeRelayed makes Open return one more receive function, last: the datagrams a
// relay hands over with Deliver. It counts in dropped (nil: a counter of the
// Bind's own) those the device could not take (RelayDrops). Call it before the
// first Open.
func (b *Bind) TakeRelayed(dropped *atomic.Uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.takeRelayed = true
	if dropped != nil {
		b.relayDrops = dropped
	}
}

// SetRelay sends what the device sends to a stand-in address through r (nil: through
// the socket, as any address).
func (b *Bind) SetRelay(r Relay) {
	if r == nil {
		b.relay.Store(nil)
		return
	}
	b.relay.Store(&relayRef{r})
}

// Deliver hands the device datagram p, relayed from the peer whose stand-in address
// is from; p is copied. It reports false, and counts a drop, when the device cannot
// take it now (its queue full, the Bind closed, or no TakeRelayed).
func (b *Bind) Deliver(p []byte, from netip.AddrPort) bool {
	if b.passesRelayed(p, from) { // the other device's, in a hand-over
		return true
	}
	return b.deliver(p, from)
}

// deliver is Deliver without the hand-over's check.
func (b *Bind) deliver(p []byte, from netip.AddrPort) bool {
	if q := b.queue.Load(); q != nil && q.put(p, from) {
		return true
	}
	b.relayDrops.Add(1)
	return false
}

// RelayDrops counts the relayed datagrams Deliver could not queue, and those too
// large for the device's buffers.
func (b *Bind) RelayDrops() uint64 {
	return b.relayDrops.Load()
}

// Open opens an IPv4 and, where the host has IPv6, an IPv6 socket on port (0: one
// the kernel picks, the same for both).
func (b *Bind) Open(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.v4 != nil {
		return nil, 0, conn.ErrBindAlreadyOpen
	}
	fns, actual, err := b.openSockets(port)
	if err != nil {
		return nil, 0, err
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	b.stopRetransmits = func() { close(done); <-stopped }
	go func() { defer close(stopped); b.retransmits(done) }()
	if !b.takeRelayed {
		return fns, actual, nil
	}
	q := newRelayed(b.relayDrops)
	b.queue.Store(q)
	return append(fns, relayedReceiver(q, &b.inits)), actual, nil
}

// relayedReceiver is the receive function of queue q: its datagrams come from their
// peers' stand-in addresses.
func relayedReceiver(q *relayed, inits *initiations) conn.ReceiveFunc {
	var eps endpoints
	var from []netip.AddrPort
	return func(packets [][]byte, sizes []int, out []conn.Endpoint) (int, error) {
		if cap(from) < len(packets) {
			from = make([]netip.AddrPort, len(packets))
		}
		n, err := q.take(packets, sizes, from[:len(packets)])
		for i := range n {
			out[i] = eps.get(from[i], transport.Local{})
			inits.responded(packets[i][:sizes[i]])
		}
		return n, err
	}
}

// openSockets opens the sockets of Open, under b.mu.
func (b *Bind) openSockets(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	// With port 0 the IPv6 socket takes the port the kernel gave the IPv4 one; when
	// that is taken on IPv6, try again with another.
	for try := 0; ; try++ {
		r4, err := b.listen(port, false)
		if err != nil {
			return nil, 0, err
		}
		actual := r4.c.LocalAddr().Port()
		r6, err := b.listen(actual, true)
		switch {
		case err == nil:
			b.v4, b.v6 = &sender{c: r4.c}, &sender{c: r6.c}
			return []conn.ReceiveFunc{r4.receive, r6.receive}, actual, nil
		case errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EADDRNOTAVAIL):
			b.v4 = &sender{c: r4.c}
			return []conn.ReceiveFunc{r4.receive}, actual, nil
		case port == 0 && errors.Is(err, unix.EADDRINUSE) && try < 100:
			_ = r4.c.Close()
			continue
		default:
			_ = r4.c.Close()
			return nil, 0, err
		}
	}
}

func (b *Bind) listen(port uint16, v6 bool) (*receiver, error) {
	r := &receiver{bufs: make([][]byte, recvMsgs), log: b.log, inits: &b.inits, b: b}
	if b.replayed != nil {
		r.replays = &replays{count: b.replayed}
	}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, bufLen)
	}
	var err error
	// SO_REUSEPORT: a new device takes over beside this one (HandOver, TakeOver).
	r.c, err = transport.Listen(transport.Options{Port: int(port), IPv6: v6, SocketBuffer: SocketBuffer, ReusePort: true,
		Mmsg: true, GSO: true, GRO: true, LocalAddrs: true, Messages: batch, Iovecs: batch}, r.bufs, b.log)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// receive is a conn.ReceiveFunc: it fills packets with datagrams, receiving a batch
// when the last one is used up.
func (r *receiver) receive(packets [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
	if r.msg >= r.n {
		n, err := r.c.Recv()
		if err != nil {
			return 0, err
		}
		r.n, r.msg, r.off = n, 0, 0
	}
	k := 0
	for k < len(packets) && r.msg < r.n {
		size, step := r.c.Size(r.msg), r.c.SegSize(r.msg)
		if size == 0 || size > len(r.bufs[r.msg]) { // empty, or cut by the buffer: not a WireGuard message
			r.msg, r.off = r.msg+1, 0
			continue
		}
		if step <= 0 || step > size {
			step = size
		}
		end := min(r.off+step, size)
		from := r.c.From(r.msg)
		if r.b.passes(r.bufs[r.msg][r.off:end], from, &r.hdr) { // the other device's, in a hand-over
			if r.off = end; r.off >= size {
				r.msg, r.off = r.msg+1, 0
			}
			continue
		}
		sizes[k] = copy(packets[k], r.bufs[r.msg][r.off:end])
		if r.replays != nil {
			r.replays.check(packets[k][:sizes[k]])
		}
		r.inits.responded(packets[k][:sizes[k]])
		eps[k] = r.eps.get(from, r.c.Local(r.msg))
		k++
		if r.off = end; r.off >= size {
			r.msg, r.off = r.msg+1, 0
		}
	}
	return k, nil
}

// Send sends bufs to ep: runs of one size go as UDP GSO messages, from the local
// address the peer last reached. When every datagram fails with that source (the
// address left the host), they go again from the route's, and the endpoint forgets
// it.
func (b *Bind) Send(bufs [][]byte, ep conn.Endpoint) error {
	e, ok := ep.(*Endpoint)
	if !ok {
		return fmt.Errorf("wgbind: endpoint %T is not the Bind's", ep)
	}
	if b.handshakeHeld(bufs) {
		return nil
	}
	for _, p := range bufs {
		b.own.learn(p)
	}
	b.inits.keep(bufs, e.ap)
	return b.send(bufs, e)
}

// send is Send without keeping the initiations.
func (b *Bind) send(bufs [][]byte, e *Endpoint) error {
	to := e.ap
	if r := b.relay.Load(); r != nil && to.Addr().IsLoopback() {
		if ok, err := r.SendRelayed(bufs, to); ok {
			return err
		}
		if b.passesRelayOut(bufs, to) { // handing over, and our relay node is closed
			return nil
		}
	}
	b.mu.Lock()
	s := b.v4
	if to.Addr().Is6() && !to.Addr().Is4In6() {
		s = b.v6
	}
	b.mu.Unlock()
	if s == nil {
		return syscall.EAFNOSUPPORT
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	src := e.source()
	err := s.send(bufs, to, src)
	if err != nil && src.IsValid() && errors.Is(err, errAllFailed) {
		e.ClearSrc()
		err = s.send(bufs, to, transport.Local{})
	}
	return err
}

// errAllFailed marks a send of which no datagram left.
var errAllFailed = errors.New("no datagram sent")

// send sends bufs to to from src, under s.mu.
func (s *sender) send(bufs [][]byte, to netip.AddrPort, src transport.Local) error {
	var failed int
	var err error
	for i, p := range bufs {
		if !s.c.Room(1) {
			f, serr := s.c.Send()
			failed, err = failed+f, errors.Join(err, serr)
		}
		if serr := s.c.StageRunFrom(p, to, src); serr != nil {
			// Not of the socket's family: cannot happen (the socket is picked by
			// to's family, src came to the same socket); what is staged still goes.
			f, _ := s.c.Send()
			failed += f + len(bufs) - i
			return fmt.Errorf("wgbind: %d of %d datagrams to %v not sent: %w", failed, len(bufs), to, serr)
		}
	}
	f, serr := s.c.Send()
	failed += f
	switch {
	case failed == 0:
		return nil
	case failed == len(bufs):
		err = errors.Join(errAllFailed, err)
	}
	return fmt.Errorf("wgbind: %d of %d datagrams to %v not sent: %w", failed, len(bufs), to, errors.Join(err, serr))
}

// ParseEndpoint reads an address and port (a UAPI endpoint= line).
func (*Bind) ParseEndpoint(s string) (conn.Endpoint, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return nil, err
	}
	return &Endpoint{ap: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}, nil
}

// BatchSize is how many datagrams wireguard-go moves per call.
func (*Bind) BatchSize() int { return batch }

// SetMark sets SO_MARK on the sockets (wg's fwmark).
func (b *Bind) SetMark(mark uint32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, s := range []*sender{b.v4, b.v6} {
		if s == nil {
			continue
		}
		var serr error
		if err := s.c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark))
		}); err != nil {
			serr = err
		}
		if serr != nil {
			errs = append(errs, fmt.Errorf("SO_MARK: %w", serr))
		}
	}
	return errors.Join(errs...)
}

// Close closes the sockets; the receive functions return net.ErrClosed.
func (b *Bind) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, s := range []*sender{b.v4, b.v6} {
		if s != nil {
			if err := s.c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
	}
	b.v4, b.v6 = nil, nil
	if q := b.queue.Swap(nil); q != nil {
		q.close()
	}
	if b.stopRetransmits != nil {
		b.stopRetransmits()
		b.stopRetransmits = nil
	}
	return errors.Join(errs...)
}
