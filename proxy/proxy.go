// Package proxy is the userspace data path of weft's udp backend: a lock-free subnet
// table and workers that move IPv4 and IPv6 packets between TUN queues and UDP sockets
// (IPv4, and with Config.IPv6 also IPv6 ones) in batches (recvmmsg/sendmmsg), checking
// and counting what they drop.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/weftnet/weft/transport"
	"go.uber.org/zap"
)

// Defaults of Config.
const (
	DefaultPort         = 8285
	DefaultBatch        = 64
	DefaultSocketBuffer = 8 << 20
	minIngressLen       = 9216 // datagrams up to jumbo frames from peers with a larger MTU
)

// Bounds of Config, enforced by the Check functions below and nowhere else.
const (
	MinMTU   = 68
	MaxMTU   = 65535
	MaxBatch = 1024
	// MaxBusyPoll bounds Config.BusyPoll: a longer window is a core per worker spent
	// for good, which no setting should do by accident.
	MaxBusyPoll = time.Second
)

// ErrConfig is wrapped by errors about a bad Config.
var ErrConfig = errors.New("bad proxy config")

// ErrClosed is returned by Run on a proxy already closed.
var ErrClosed = errors.New("udp data path closed")

// Config tunes the data path. Zero values take the defaults; every kernel feature can
// be switched off here (weftd maps its WEFT_UDP_* environment variables onto it).
type Config struct {
	// Port is the UDP port of every host (flannel: 8285).
	Port int
	// Addr is the local IPv4 address the sockets bind to (flanneld binds its
	// interface's address: datagrams leave from it whatever the routes say); the zero
	// Addr binds every address.
	Addr netip.Addr
	// IPv6 also opens, per worker, an IPv6 socket on Port (bound to Addr6, or every
	// IPv6 address): the IPv6 underlay, for peers whose public address is IPv6.
	IPv6  bool
	Addr6 netip.Addr
	// MTU is the TUN device's MTU: the largest packet read from it. Required.
	MTU int
	// Tuning is how the data path moves packets (weftd's WEFT_UDP_* variables).
	Tuning
	// BusyPoll, if positive, runs each worker as one loop over both directions that
	// keeps polling without sleeping for this long after the last packet it moved.
	// It trades CPU (up to a core per worker while traffic flows) for latency: no
	// packet waits for a sleeping thread to wake. 0 (the default) sleeps at once.
	BusyPoll time.Duration
}

// Tuning is how the data path moves packets beyond what the network config says:
// weftd fills it from its environment and the udp backend passes it on. The zero
// value is the default.
type Tuning struct {
	// Batch is the most packets moved per system call (default 64).
	Batch int
	// SocketBuffer is the size asked for each socket's send and receive buffers
	// (SO_*BUFFORCE as root, else SO_*BUF); negative leaves the kernel's default.
	SocketBuffer int
	// NoReusePort gives up SO_REUSEPORT; only one worker can then bind the port.
	NoReusePort bool
	// NoMmsg uses one sendmsg/recvmsg per packet instead of sendmmsg/recvmmsg.
	NoMmsg bool
	// NoGSO gives up UDP GSO (UDP_SEGMENT) for segments cut from TUN super packets.
	NoGSO bool
	// NoGRO gives up UDP GRO on the sockets (used only with TUN offloads).
	NoGRO bool
}

// CheckPort reports a UDP port outside 1-65535.
func CheckPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("%w: Port %d is not in 1-65535", ErrConfig, port)
	}
	return nil
}

// CheckMTU reports a TUN MTU outside MinMTU-MaxMTU.
func CheckMTU(mtu int) error {
	if mtu < MinMTU || mtu > MaxMTU {
		return fmt.Errorf("%w: MTU %d is not in %d-%d", ErrConfig, mtu, MinMTU, MaxMTU)
	}
	return nil
}

// CheckBatch reports a batch size outside 1-MaxBatch (0 is the default, and passes).
func CheckBatch(n int) error {
	if n < 0 || n > MaxBatch {
		return fmt.Errorf("%w: Batch %d is not in 1-%d", ErrConfig, n, MaxBatch)
	}
	return nil
}

// CheckBusyPoll reports a busy poll window outside 0-MaxBusyPoll.
func CheckBusyPoll(d time.Duration) error {
	if d < 0 || d > MaxBusyPoll {
		return fmt.Errorf("%w: BusyPoll %s is not in 0s-%s", ErrConfig, d, MaxBusyPoll)
	}
	return nil
}

// Check reports the fields of c out of bounds (zero fields take their defaults),
// each error naming its field; New checks the same.
func (c Config) Check() error {
	_, err := c.withDefaults()
	return err
}

func (c Config) withDefaults() (Config, error) {
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if c.SocketBuffer == 0 {
		c.SocketBuffer = DefaultSocketBuffer
	}
	return c, errors.Join(CheckPort(c.Port), CheckMTU(c.MTU), CheckBatch(c.Batch), CheckBusyPoll(c.BusyPoll))
}

// Proxy runs one worker per TUN queue, each with its own UDP socket on Config.Port.
// It owns the queues it is given: Close closes them.
type Proxy struct {
	workers []*worker
	recv6   []*worker // IPv6 underlay receivers, one per worker (Config.IPv6)
	cnts    []counters
	log     *zap.Logger
	closeMu sync.Mutex
	closed  bool
	started bool // Run started the workers
}

// New opens one UDP socket per queue (in the network namespace of the calling thread)
// and prepares the workers; Run starts them.
func New(cfg Config, table *Table, queues []TUN, log *zap.Logger) (*Proxy, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(queues) == 0 {
		return nil, fmt.Errorf("%w: no TUN queues", ErrConfig)
	}
	if len(queues) > 1 && cfg.NoReusePort {
		return nil, fmt.Errorf("%w: %d queues need SO_REUSEPORT", ErrConfig, len(queues))
	}
	p := &Proxy{cnts: make([]counters, len(queues)), log: log}
	opts := transport.Options{Addr: cfg.Addr, Port: cfg.Port, ReusePort: !cfg.NoReusePort, SocketBuffer: cfg.SocketBuffer, Mmsg: !cfg.NoMmsg,
		GSO: !cfg.NoGSO}
	for i, q := range queues {
		w := newWorker(q, table, cfg.Batch, cfg.MTU, max(cfg.MTU, minIngressLen), !cfg.NoGRO, &p.cnts[i], log)
		opts.GRO, opts.Messages, opts.Iovecs = w.rx.udpGRO, w.tx.slots, 2*w.tx.slots
		rb := make([][]byte, len(w.rx.bufs))
		for j, b := range w.rx.bufs {
			rb[j] = b[Headroom:]
		}
		w.conn, err = transport.Listen(opts, rb, log)
		if err != nil && i == 0 && opts.ReusePort && len(queues) == 1 {
			log.Warn("SO_REUSEPORT refused; one socket", zap.Error(err))
			opts.ReusePort = false
			w.conn, err = transport.Listen(opts, rb, log)
		}
		if err != nil {
			p.Close()
			return nil, err
		}
		w.port = w.conn.LocalAddr().Port()
		p.workers = append(p.workers, w)
		if cfg.IPv6 {
			w6, err := p.open6(cfg, opts, table, q, i)
			if err != nil {
				p.Close()
				return nil, err
			}
			w.conn6 = w6.conn
			p.recv6 = append(p.recv6, w6)
		}
		if cfg.BusyPoll > 0 {
			bp, ok, err := newBusyPoller(q, cfg.BusyPoll)
			if err != nil {
				p.Close()
				return nil, err
			}
			if !ok {
				p.Close()
				return nil, fmt.Errorf("%w: busy poll: TUN queue %T cannot be polled", ErrConfig, q)
			}
			w.busy = bp
		}
	}
	rcv, snd := p.workers[0].conn.BufSizes()
	log.Info("udp data path ready", zap.Int("workers", len(p.workers)), zap.Int("port", cfg.Port),
		zap.Int("batch", cfg.Batch), zap.Int("mtu", cfg.MTU), zap.Int("rcvbuf", rcv), zap.Int("sndbuf", snd),
		zap.Bool("reuseport", opts.ReusePort), zap.Bool("mmsg", opts.Mmsg), zap.Bool("gso", p.workers[0].conn.GSO()), zap.Bool("gro", p.workers[0].conn.GRO()),
		zap.Bool("tun_offload", p.workers[0].vnet), zap.Duration("busy_poll", cfg.BusyPoll))
	return p, nil
}

// open6 opens the IPv6 underlay socket of worker i and its receiving worker, which
// shares the worker's TUN queue and counters.
func (p *Proxy) open6(cfg Config, opts transport.Options, table *Table, q TUN, i int) (*worker, error) {
	w6 := newWorker(q, table, cfg.Batch, cfg.MTU, max(cfg.MTU, minIngressLen), !cfg.NoGRO, &p.cnts[i], p.log)
	w6.under6 = true
	w6.rx.src6 = make([][16]byte, len(w6.rx.bufs))
	opts.IPv6, opts.Addr, opts.GRO, opts.Messages, opts.Iovecs = true, cfg.Addr6, w6.rx.udpGRO, w6.tx.slots, 2*w6.tx.slots
	rb := make([][]byte, len(w6.rx.bufs))
	for j, b := range w6.rx.bufs {
		rb[j] = b[Headroom:]
	}
	var err error
	w6.conn, err = transport.Listen(opts, rb, p.log)
	if err != nil {
		return nil, fmt.Errorf("IPv6 underlay: %w", err)
	}
	return w6, nil
}

// Run runs the workers until ctx ends or one of them fails, then closes the sockets
// and queues, waits for every worker and returns the failure (nil when ctx ended).
func (p *Proxy) Run(ctx context.Context) error {
	p.closeMu.Lock()
	if p.closed {
		p.closeMu.Unlock()
		return ErrClosed
	}
	p.started = true
	p.closeMu.Unlock()
	errc := make(chan error, 2*len(p.workers)+len(p.recv6))
	running := 0
	for _, w := range p.workers {
		if w.busy != nil {
			go func() { errc <- w.busyPoll() }()
			running++
			continue
		}
		go func() { errc <- w.egress() }()
		go func() { errc <- w.ingress() }()
		running += 2
	}
	for _, w := range p.recv6 {
		go func() { errc <- w.ingress() }()
		running++
	}
	var first error
	select {
	case <-ctx.Done():
		running -= p.drain(errc, running)
	case first = <-errc:
		first = fmt.Errorf("udp data path stopped: %w", first)
		running--
	}
	p.Close()
	for range running {
		<-errc
	}
	for _, w := range p.workers {
		if w.busy != nil {
			w.busy.release()
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return first
}

// drainFor is how long the workers go on when Run's context ends, before the sockets
// and queues close: what is queued, or in a worker's hands, is forwarded rather than
// dropped. On a hand-over the kernel steers part of the traffic to the old weftd's
// queues until they close; the new weftd's data path starts once the old one stopped.
const drainFor = 20 * time.Millisecond

// readDeadliner is a TUN queue whose Read can be made to return at a time
// (tun.Queue): the workers of a Proxy whose queues all are drain them on stop.
type readDeadliner interface {
	SetReadDeadline(t time.Time) error
}

// drain lets the workers read what is queued for drainFor, then waits for them to
// return as their reads run out of time (at most a second more), and reports how
// many did: the sockets and queues close after. Busy-polling workers, and queues
// without deadlines, are not drained (0).
func (p *Proxy) drain(errc <-chan error, running int) int {
	at := time.Now().Add(drainFor)
	for _, w := range p.workers {
		d, ok := w.tun.(readDeadliner)
		if !ok || w.busy != nil || d.SetReadDeadline(at) != nil || w.conn.SetReadDeadline(at) != nil {
			return 0
		}
	}
	for _, w := range p.recv6 {
		if w.conn.SetReadDeadline(at) != nil {
			return 0
		}
	}
	t := time.NewTimer(drainFor + time.Second)
	defer t.Stop()
	for n := range running {
		select {
		case <-errc: // the read's deadline, or whatever else ended it: we stop anyway
		case <-t.C:
			return n
		}
	}
	return running
}

// Close closes the sockets and the TUN queues (those that have a Close method); the
// workers blocked on them return.
func (p *Proxy) Close() error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	for _, w := range p.recv6 {
		errs = append(errs, w.conn.Close())
	}
	for _, w := range p.workers {
		if w.conn != nil {
			errs = append(errs, w.conn.Close())
		}
		if c, ok := w.tun.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
		if w.busy != nil {
			w.busy.stop()
			if !p.started {
				w.busy.release()
			}
		}
	}
	return errors.Join(errs...)
}

// Stats sums the workers' counters.
func (p *Proxy) Stats() Stats {
	s := Stats{Drops: make(map[string]uint64, numDropReasons)}
	for i := range p.cnts {
		p.cnts[i].addTo(&s)
	}
	return s
}
