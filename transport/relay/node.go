package relay

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftnet/weft/transport"
	"go.uber.org/zap"
	"golang.org/x/crypto/blake2s"
	"golang.org/x/crypto/curve25519"
)

// DefaultPort is the path port: where weftd's relay socket listens on every host of
// the wireguard backend.
const DefaultPort = 51822

// regTTL is how long a hello registers its sender with a relay: senders say hello
// every HelloEvery, which also keeps their NAT's mapping of the path port open.
const (
	regTTL     = 45 * time.Second
	HelloEvery = 10 * time.Second
)

// socketBuffer is what the path port's socket and the loopback sockets ask for to
// receive and send: with the default (about 200 KiB) a TCP stream through a relay
// overflowed them at every hop (thousands of UdpRcvbufErrors a second).
const socketBuffer = 4 << 20

// maxFrame is the largest datagram read: a WireGuard datagram of any MTU and the
// relay frame around it.
const maxFrame = 65535

// Config is a Node's.
type Config struct {
	// Port is the UDP port of the relay socket.
	Port int
	// Addr is the address the relay socket listens on (zero, as weftd runs it:
	// every address of both families). Tests listen on 127.0.0.1: the socket then
	// cannot send beyond the host.
	Addr netip.Addr
	// Private is our WireGuard private key: the hellos' MACs are keyed by it.
	Private [32]byte
	// WGPort is where our WireGuard device listens: relayed datagrams are handed to
	// it on 127.0.0.1 at this port.
	WGPort int
	// SeenAt is where our WireGuard device sees peer k's device (the endpoint in
	// use), told to k in the answer to its hello; nil or an invalid address: unknown.
	SeenAt func(k Key) netip.AddrPort
	// Registrations are the hosts an earlier node on this host relayed for
	// (Registrations), relayed at once: without them a restarted relay drops their
	// frames until each says hello again, up to HelloEvery later. Those older than
	// the registrations' lifetime are left out.
	Registrations []Registration
	// From is the relay socket an earlier node on this host handed on (Hand), to go
	// on with instead of opening one: what reached it since waits there. Listen takes
	// a copy; the caller closes From.
	From *os.File
	Log  *zap.Logger
}

// Registration is a host that said hello to us: its key, where its hello came from
// and when, and the hello's time (a hello no newer is a replay).
type Registration struct {
	Key  Key
	Addr netip.AddrPort
	At   time.Time
	TS   uint64
}

// Device is a WireGuard device in this process that takes relayed datagrams
// without a socket (transport/wgbind's Bind); it sends through the Node's
// SendRelayed. Without one (SetDevice), relayed datagrams are sent to the device's
// port on loopback from the peer's loopback socket, as the kernel's device needs.
type Device interface {
	// Deliver hands the device datagram p (copied) as from the stand-in address
	// from; false: not taken (counted as a drop).
	Deliver(p []byte, from netip.AddrPort) bool
}

// Node is one host's relay socket: it answers hellos, relays, pings and hands relayed
// WireGuard datagrams to the local device. Its methods may be called at any time from
// any goroutine.
type Node struct {
	cfg  Config
	pub  Key
	conn *transport.Conn
	bufs [][]byte       // conn's receive buffers, Run's
	wg   netip.AddrPort // our device on loopback

	// sendMu serializes the socket's send side: Run forwards a batch of relayed
	// datagrams in one sendmmsg; hellos, pings and the loopback readers send one.
	sendMu sync.Mutex

	mu     sync.Mutex
	regs   map[Key]registration // hosts registered with us, as their relay
	lastTS map[Key]uint64       // the newest hello's time from each key
	// noPeerTS is the newest "no peer" time from each relay; hellos is where we said
	// hello to each key (a relay's word counts only from there).
	noPeerTS map[Key]uint64
	hellos   map[Key]netip.AddrPort
	sent     map[Key]uint64         // our last hello's time to each key
	seen     map[Key]Seen           // what each host we said hello to sees of us
	routes   map[Key]netip.AddrPort // the relay for datagrams to a peer
	heard    map[Key]netip.AddrPort // the relay a peer's datagrams last came through
	locals   map[Key]*local
	standIns map[netip.AddrPort]Key // the locals by address
	pings    map[uint64]pingSent
	// pingsSwept: when the expired pings were last dropped (every pingSweepEvery).
	pingsSwept time.Time
	rtts       map[pathID]Measure
	macs       map[Key][32]byte
	// punches is the newest "punch now" from each peer, punchTS its time (a replay
	// or an older one is dropped).
	punches map[Key]Punch
	punchTS map[Key]uint64
	closed  bool

	pingMu  sync.Mutex
	pingBuf []byte // Pings' frames and payloads (n.pingMu)

	device atomic.Pointer[deviceRef] // SetDevice's

	// reading is held by Run; handed: Hand stopped it, and the socket is the next
	// node's to read.
	reading sync.Mutex
	handed  atomic.Bool

	forwarded, forwardedBytes atomic.Uint64
	dropped, punchDrops       atomic.Uint64
	swept                     time.Time // registrations last swept of the expired (n.mu)
}

type registration struct {
	addr netip.AddrPort
	at   time.Time
}

// Seen is what a host we said hello to sees of us: where our hello came from (the
// relay socket's outside address), and where its WireGuard device sees ours.
type Seen struct {
	Relay, WireGuard netip.AddrPort
	At               time.Time
	RTT              time.Duration
}

type pingSent struct {
	id  pathID
	at  time.Time
	due time.Time
}

// pathID is a way to a peer: straight (via invalid) or through the relay at via;
// a straight ping to an address of the peer's NAT (PingAt) is told apart by at.
type pathID struct {
	peer Key
	via  netip.AddrPort
	at   netip.AddrPort
}

// Punch is a peer's "punch now": where its path socket is seen from outside its NAT
// (Addr), and when it came. Both sides ping each other's there at once, which opens
// both NATs' mappings for the other.
type Punch struct {
	Addr netip.AddrPort
	At   time.Time
}

// Measure is what the pings of one way found: the last round trip and when it was
// answered; NoPeer is set when the relay said it cannot reach the peer.
type Measure struct {
	RTT    time.Duration
	At     time.Time
	NoPeer time.Time
}

// Listen opens the relay socket on port cfg.Port of every address.
func Listen(cfg Config) (*Node, error) {
	pub, err := curve25519.X25519(cfg.Private[:], curve25519.Basepoint)
	if err != nil {
		return nil, fmt.Errorf("relay: our public key: %w", err)
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	bufs := make([][]byte, recvBatch)
	for i := range bufs {
		bufs[i] = make([]byte, maxFrame)
	}
	conn, err := transport.Listen(transport.Options{Addr: cfg.Addr, Port: cfg.Port, DualStack: !cfg.Addr.IsValid(), Mmsg: true, GSO: true, GRO: true,
		Messages: recvBatch, Iovecs: sendIovecs, SocketBuffer: socketBuffer, From: cfg.From}, bufs, cfg.Log)
	if err != nil {
		return nil, fmt.Errorf("relay: listen on UDP %d: %w", cfg.Port, err)
	}
	n := &Node{cfg: cfg, pub: Key(pub), conn: conn, bufs: bufs,
		wg:   netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(cfg.WGPort)),
		regs: map[Key]registration{}, lastTS: map[Key]uint64{}, noPeerTS: map[Key]uint64{}, hellos: map[Key]netip.AddrPort{}, sent: map[Key]uint64{}, seen: map[Key]Seen{},
		routes: map[Key]netip.AddrPort{}, heard: map[Key]netip.AddrPort{}, locals: map[Key]*local{}, standIns: map[netip.AddrPort]Key{},
		pings: map[uint64]pingSent{}, rtts: map[pathID]Measure{}, macs: map[Key][32]byte{},
		punches: map[Key]Punch{}, punchTS: map[Key]uint64{},
	}
	now := time.Now()
	for _, r := range cfg.Registrations {
		if !r.Addr.IsValid() || r.At.After(now) || now.Sub(r.At) > regTTL {
			continue
		}
		n.regs[r.Key] = registration{addr: r.Addr, at: r.At}
		n.lastTS[r.Key] = max(n.lastTS[r.Key], r.TS)
	}
	return n, nil
}

// Registrations are the hosts we relay for now (registered by a hello within the
// registrations' lifetime), for the next node on this host (Config.Registrations).
func (n *Node) Registrations() []Registration {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	out := make([]Registration, 0, len(n.regs))
	for k, r := range n.regs {
		if now.Sub(r.at) <= regTTL {
			out = append(out, Registration{Key: k, Addr: r.addr, At: r.at, TS: n.lastTS[k]})
		}
	}
	return out
}

type deviceRef struct{ Device }

// SetDevice hands relayed datagrams to d in process from now on (nil: through the
// loopback sockets).
func (n *Node) SetDevice(d Device) {
	if d == nil {
		n.device.Store(nil)
		return
	}
	n.device.Store(&deviceRef{d})
}

// recvBatch is how many datagrams Run takes per recvmmsg, and forwards per sendmmsg;
// sendIovecs the pieces one sendmmsg gathers: SendRelayed's runs take two per
// datagram (header, datagram), up to a GSO message's 64 datagrams, twice over.
const (
	recvBatch  = 32
	sendIovecs = 4 * 64
)

// Port is the port the socket listens on.
func (n *Node) Port() int { return int(n.conn.LocalAddr().Port()) }

// Run reads the relay socket until ctx ends or the node is closed. The datagrams of
// one batch that it relays go out together, after the batch.
func (n *Node) Run(ctx context.Context) error {
	n.reading.Lock()
	defer n.reading.Unlock()
	stop := context.AfterFunc(ctx, func() { _ = n.Close() })
	defer stop()
	for {
		k, err := n.conn.Recv()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || n.handed.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			// ICMP errors of an earlier send (ECONNREFUSED) end up here: not ours to end on.
			continue
		}
		for i := range k {
			size, seg := n.conn.Size(i), n.conn.SegSize(i)
			if size > len(n.bufs[i]) {
				n.dropped.Add(1) // larger than any frame
				continue
			}
			if seg <= 0 || seg > size {
				seg = size
			}
			// A GRO message holds frames of one size from one sender, the last
			// maybe shorter: each is handled on its own.
			from := n.conn.From(i)
			for off := 0; off < size; off += seg {
				n.handle(n.bufs[i][off:min(off+seg, size)], from)
			}
		}
		n.flush() // before the next Recv overwrites what was staged
	}
}

// send sends b to addr now.
func (n *Node) send(b []byte, addr netip.AddrPort) error {
	n.sendMu.Lock()
	defer n.sendMu.Unlock()
	if !n.conn.Room(1) {
		n.sendLocked()
	}
	if err := n.conn.Stage(b, addr); err != nil {
		return err
	}
	if failed, err := n.conn.Send(); failed > 0 {
		return err
	}
	return nil
}

// stage queues b, which must stay as it is until the next flush, for addr; it
// reports whether b is queued.
func (n *Node) stage(b []byte, addr netip.AddrPort) bool {
	n.sendMu.Lock()
	defer n.sendMu.Unlock()
	if !n.conn.Room(1) {
		n.sendLocked()
	}
	return n.conn.StageRun(b, addr) == nil
}

// flush sends what stage queued.
func (n *Node) flush() {
	n.sendMu.Lock()
	defer n.sendMu.Unlock()
	n.sendLocked()
}

func (n *Node) sendLocked() {
	if n.conn.Staged() == 0 {
		return
	}
	if failed, _ := n.conn.Send(); failed > 0 {
		n.dropped.Add(uint64(failed))
	}
}

// Hand stops reading the relay socket and returns a copy of it for the next node on
// this host (Config.From): what reaches the socket from now on waits there for that
// node, where a socket closed and opened again would drop it, and the relays' hosts
// would say hello to nobody meanwhile. Run returns before Hand does, so that
// Registrations are final. The node still sends (to relayed peers, for the device
// that goes on in a hand-over) until Close.
func (n *Node) Hand() (*os.File, error) {
	f, err := n.conn.File()
	if err != nil {
		return nil, fmt.Errorf("relay: a copy of the socket: %w", err)
	}
	n.handed.Store(true)
	if err := n.conn.SetReadDeadline(time.Unix(1, 0)); err != nil {
		f.Close()
		return nil, fmt.Errorf("relay: stop reading: %w", err)
	}
	n.reading.Lock() // Run has returned
	defer n.reading.Unlock()
	return f, nil
}

// Close closes the relay socket and every loopback socket. PeerOf still knows the
// loopback addresses after it.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	locals := n.locals
	n.locals = map[Key]*local{}
	n.mu.Unlock()
	errs := []error{n.conn.Close()}
	for _, l := range locals {
		errs = append(errs, l.close())
	}
	return errors.Join(errs...)
}

// Forwarded is what this host relayed for others: packets and bytes.
func (n *Node) Forwarded() (packets, bytes uint64) {
	return n.forwarded.Load(), n.forwardedBytes.Load()
}

// Dropped counts frames dropped: malformed, unauthenticated, unroutable.
func (n *Node) Dropped() uint64 { return n.dropped.Load() }

// macKey is the MAC key shared with peer k: a hash of our static Diffie-Hellman.
func (n *Node) macKey(k Key) ([32]byte, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if m, ok := n.macs[k]; ok {
		return m, true
	}
	shared, err := curve25519.X25519(n.cfg.Private[:], k[:])
	if err != nil {
		return [32]byte{}, false // a low-order key: no MAC with it
	}
	h, _ := blake2s.New256(nil)
	h.Write([]byte("weft relay hello v1"))
	h.Write(shared)
	var m [32]byte
	copy(m[:], h.Sum(nil))
	if len(n.macs) > 4096 {
		clear(n.macs)
	}
	n.macs[k] = m
	return m, true
}

func mac(key [32]byte, b []byte) [macLen]byte {
	h, _ := blake2s.New128(key[:])
	h.Write(b)
	return [macLen]byte(h.Sum(nil))
}

// Hello says hello to the host of key k at addr: it registers us with it as a
// relay and answers with where it sees us (Seen).
func (n *Node) Hello(k Key, addr netip.AddrPort) error {
	mk, ok := n.macKey(k)
	if !ok {
		return fmt.Errorf("relay: hello: a key no MAC can be made with")
	}
	ts := uint64(time.Now().UnixNano())
	var b [helloLen]byte
	putHeader(b[:], tHello)
	copy(b[5:], n.pub[:])
	binary.BigEndian.PutUint64(b[37:], ts)
	m := mac(mk, b[:helloLen-macLen])
	copy(b[helloLen-macLen:], m[:])
	n.mu.Lock()
	n.sent[k] = ts
	n.hellos[k] = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	n.mu.Unlock()
	return n.send(b[:], addr)
}

// Seen is what each host we said hello to sees of us, by its key.
func (n *Node) Seen() map[Key]Seen {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[Key]Seen, len(n.seen))
	for k, s := range n.seen {
		out[k] = s
	}
	return out
}

// handle is what a frame from src does.
func (n *Node) handle(b []byte, src netip.AddrPort) {
	t, err := frameType(b)
	if err != nil {
		n.dropped.Add(1)
		return
	}
	switch t {
	case tHello:
		n.onHello(b, src)
	case tHelloAck:
		n.onAck(b)
	case tRelay:
		n.onRelay(b, src)
	case tDeliver:
		n.onDeliver(b, src)
	case tNoPeer:
		n.onNoPeer(b, src)
	}
}

// onNoPeer takes a relay's word that it cannot reach a peer: only from a key we said
// hello to, from the address we said it to, with the MAC of the key we share with it,
// and newer than the last it sent (a forged or replayed one would make us leave a
// working relay).
func (n *Node) onNoPeer(b []byte, src netip.AddrPort) {
	from, to := Key(b[5:37]), Key(b[37:69])
	ts := binary.BigEndian.Uint64(b[69:])
	mk, ok := n.macKey(from)
	if m := mac(mk, b[:noPeerLen-macLen]); !ok || subtle.ConstantTimeCompare(m[:], b[noPeerLen-macLen:noPeerLen]) != 1 {
		n.dropped.Add(1)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hellos[from] != netip.AddrPortFrom(src.Addr().Unmap(), src.Port()) {
		n.dropped.Add(1) // a key we did not ask to relay, or not from where we asked it
		return
	}
	if ts <= n.noPeerTS[from] {
		n.dropped.Add(1) // replayed
		return
	}
	n.noPeerTS[from] = ts
	m := n.rtts[pathID{peer: to, via: src}]
	m.NoPeer = time.Now()
	n.rtts[pathID{peer: to, via: src}] = m
}

func (n *Node) onHello(b []byte, src netip.AddrPort) {
	from := Key(b[5:37])
	ts := binary.BigEndian.Uint64(b[37:])
	mk, ok := n.macKey(from)
	if m := mac(mk, b[:helloLen-macLen]); !ok || subtle.ConstantTimeCompare(m[:], b[helloLen-macLen:helloLen]) != 1 {
		n.dropped.Add(1)
		return
	}
	n.mu.Lock()
	if ts <= n.lastTS[from] {
		n.mu.Unlock()
		n.dropped.Add(1) // a replay
		return
	}
	n.lastTS[from] = ts
	now := time.Now()
	n.regs[from] = registration{addr: src, at: now}
	if now.Sub(n.swept) > regTTL {
		// Hosts gone (or with a new key) leave their registration: swept once a TTL.
		n.swept = now
		for k, r := range n.regs {
			if now.Sub(r.at) > regTTL {
				delete(n.regs, k)
			}
		}
	}
	n.mu.Unlock()
	var wgSeen netip.AddrPort
	if n.cfg.SeenAt != nil {
		wgSeen = n.cfg.SeenAt(from)
	}
	var a [ackLen]byte
	putHeader(a[:], tHelloAck)
	copy(a[5:], n.pub[:])
	binary.BigEndian.PutUint64(a[37:], ts)
	putAddr(a[45:], src)
	putAddr(a[45+addrLen:], wgSeen)
	m := mac(mk, a[:ackLen-macLen])
	copy(a[ackLen-macLen:], m[:])
	_ = n.send(a[:], src)
}

func (n *Node) onAck(b []byte) {
	from := Key(b[5:37])
	ts := binary.BigEndian.Uint64(b[37:])
	mk, ok := n.macKey(from)
	if m := mac(mk, b[:ackLen-macLen]); !ok || subtle.ConstantTimeCompare(m[:], b[ackLen-macLen:ackLen]) != 1 {
		n.dropped.Add(1)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sent[from] != ts {
		return // an answer to an older hello
	}
	now := time.Now()
	n.seen[from] = Seen{Relay: getAddr(b[45:]), WireGuard: getAddr(b[45+addrLen:]), At: now,
		RTT: now.Sub(time.Unix(0, int64(ts)))}
}

// noPeer tells registered host from, at src, that we cannot reach to, with the MAC
// of the key we share with it and our time, which only grows.
func (n *Node) noPeer(from, to Key, src netip.AddrPort) {
	mk, ok := n.macKey(from)
	if !ok {
		return
	}
	var b [noPeerLen]byte
	putHeader(b[:], tNoPeer)
	copy(b[5:], n.pub[:])
	copy(b[37:], to[:])
	binary.BigEndian.PutUint64(b[69:], uint64(time.Now().UnixNano()))
	m := mac(mk, b[:noPeerLen-macLen])
	copy(b[noPeerLen-macLen:], m[:])
	_ = n.send(b[:], src)
}

// onRelay forwards a datagram from a registered host to the registered host it names.
func (n *Node) onRelay(b []byte, src netip.AddrPort) {
	to, from := Key(b[5:37]), Key(b[37:69])
	now := time.Now()
	n.mu.Lock()
	fr, okFrom := n.regs[from]
	dst, okTo := n.regs[to]
	n.mu.Unlock()
	if !okFrom || fr.addr != src || now.Sub(fr.at) > regTTL {
		n.dropped.Add(1) // not an open relay: senders say hello first
		return
	}
	if !okTo || now.Sub(dst.at) > regTTL {
		n.noPeer(from, to, src)
		n.dropped.Add(1)
		return
	}
	// The delivery in place: its header (type, from, flag) ends where the relay
	// frame's did.
	payload := len(b) - relayHdr
	out := b[relayHdr-deliverHd:]
	copy(out[5:37], b[37:69])
	putHeader(out, tDeliver)
	out[37] = flagRelayed
	if n.stage(out, dst.addr) { // a failed send is counted as a drop
		n.forwarded.Add(1)
		n.forwardedBytes.Add(uint64(payload))
	} else {
		n.dropped.Add(1) // refused before staging (an address the socket cannot take)
	}
}

// onDeliver takes a datagram for us, straight or through a relay.
func (n *Node) onDeliver(b []byte, src netip.AddrPort) {
	from := Key(b[5:37])
	relayed := b[37]&flagRelayed != 0
	p := b[deliverHd:]
	switch {
	case isWireGuard(p):
		if !relayed {
			n.dropped.Add(1)
			return
		}
		n.mu.Lock()
		n.heard[from] = src
		l, err := n.localLocked(from)
		n.mu.Unlock()
		if err != nil {
			n.dropped.Add(1)
			return
		}
		if d := n.device.Load(); d != nil {
			if !d.Deliver(p, l.addr) {
				n.dropped.Add(1)
			}
			return
		}
		_, _ = l.conn.WriteToUDPAddrPort(p, n.wg)
	case len(p) >= pingLen && p[0] == pPing:
		var pong [pingLen]byte
		pong[0] = pPong
		copy(pong[1:], p[1:pingLen])
		if relayed {
			_ = n.sendRelay(from, src, pong[:])
		} else {
			_ = n.sendDirect(src, pong[:])
		}
	case len(p) >= punchLen && p[0] == pPunch:
		n.onPunch(from, p[:punchLen], relayed)
	case len(p) >= pingLen && p[0] == pPong:
		id := binary.BigEndian.Uint64(p[1:])
		now := time.Now()
		n.mu.Lock()
		s, ok := n.pings[id]
		delete(n.pings, id)
		if ok && s.id.peer == from {
			n.rtts[s.id] = Measure{RTT: now.Sub(s.at), At: now, NoPeer: n.rtts[s.id].NoPeer}
		}
		n.mu.Unlock()
	default:
		n.dropped.Add(1)
	}
}

// PunchNow tells peer k, through the relay at via, to punch now: to ping our path
// socket at ours (where a relay sees it from outside our NAT) while we ping its. The
// message carries our time, which only grows, and the MAC of the key k and we share:
// a forged or replayed one is dropped and counted.
func (n *Node) PunchNow(k Key, via, ours netip.AddrPort) error {
	mk, ok := n.macKey(k)
	if !ok {
		return fmt.Errorf("relay: punch now: a key no MAC can be made with")
	}
	var p [punchLen]byte
	p[0] = pPunch
	binary.BigEndian.PutUint64(p[1:], uint64(time.Now().UnixNano()))
	putAddr(p[9:], ours)
	m := mac(mk, p[:punchLen-macLen])
	copy(p[punchLen-macLen:], m[:])
	return n.sendRelay(k, via, p[:])
}

// onPunch takes peer from's "punch now": only through a relay, with the MAC of the
// key we share, newer than the last, and naming an address.
func (n *Node) onPunch(from Key, p []byte, relayed bool) {
	mk, ok := n.macKey(from)
	if m := mac(mk, p[:punchLen-macLen]); !ok || !relayed || subtle.ConstantTimeCompare(m[:], p[punchLen-macLen:]) != 1 {
		n.dropped.Add(1)
		n.punchDrops.Add(1)
		return
	}
	ts := binary.BigEndian.Uint64(p[1:])
	addr := getAddr(p[9:])
	n.mu.Lock()
	defer n.mu.Unlock()
	if ts <= n.punchTS[from] || !addr.IsValid() {
		n.dropped.Add(1)
		n.punchDrops.Add(1)
		return
	}
	n.punchTS[from] = ts
	n.punches[from] = Punch{Addr: addr, At: time.Now()}
}

// PunchOf is peer k's newest "punch now" (zero: none).
func (n *Node) PunchOf(k Key) Punch {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.punches[k]
}

// PunchDrops counts "punch now" messages dropped: forged, replayed, older than the
// last, not through a relay, or naming no address.
func (n *Node) PunchDrops() uint64 { return n.punchDrops.Load() }

// PingAt sends a ping straight to peer k's path socket at addr, an address of its
// NAT's (a Punch's); MeasuredAt reads what its answers found.
func (n *Node) PingAt(k Key, addr netip.AddrPort) error {
	return n.ping(pathID{peer: k, at: addr}, netip.AddrPort{}, addr)
}

// MeasuredAt is what the pings PingAt sent to peer k at addr found.
func (n *Node) MeasuredAt(k Key, addr netip.AddrPort) Measure {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rtts[pathID{peer: k, at: addr}]
}

// sendRelay sends payload p to peer to through the relay at via.
func (n *Node) sendRelay(to Key, via netip.AddrPort, p []byte) error {
	return n.send(n.putRelay(make([]byte, relayHdr+len(p)), to, p), via)
}

// sendDirect sends payload p straight to the relay socket at addr.
func (n *Node) sendDirect(addr netip.AddrPort, p []byte) error {
	return n.send(n.putDirect(make([]byte, deliverHd+len(p)), p), addr)
}

// putRelay writes the frame carrying payload p to peer to through a relay into b,
// which has room for it, and returns it.
func (n *Node) putRelay(b []byte, to Key, p []byte) []byte {
	b = b[:relayHdr+len(p)]
	putHeader(b, tRelay)
	copy(b[5:], to[:])
	copy(b[37:], n.pub[:])
	copy(b[relayHdr:], p)
	return b
}

// putDirect writes the frame carrying payload p straight to a peer's relay socket
// into b, which has room for it, and returns it.
func (n *Node) putDirect(b []byte, p []byte) []byte {
	b = b[:deliverHd+len(p)]
	putHeader(b, tDeliver)
	copy(b[5:], n.pub[:])
	b[deliverHd-1] = 0
	copy(b[deliverHd:], p)
	return b
}

// pingSweepEvery is how often the pings without an answer past their due are
// dropped.
const pingSweepEvery = time.Second

// Ping sends a ping to peer k: through the relay at via, or straight to its relay
// socket at addr when via is invalid. Measured reads what the answers found.
func (n *Node) Ping(k Key, via, addr netip.AddrPort) error {
	return n.ping(pathID{peer: k, via: via}, via, addr)
}

// ping sends a ping for way id, through the relay at via or straight to addr.
func (n *Node) ping(pid pathID, via, addr netip.AddrPort) error {
	var p [pingLen]byte
	n.newPings(p[:], time.Now(), []pathID{pid})
	if via.IsValid() {
		return n.sendRelay(pid.peer, via, p[:])
	}
	return n.sendDirect(addr, p[:])
}

// A PingTo is one ping of a batch (Pings): to peer Peer through the relay at Via,
// or, Via invalid, straight to its relay socket at Addr. At marks a straight ping to
// an address of the peer's NAT (a Punch's: MeasuredAt reads its answers) rather than
// its direct way (Measured).
type PingTo struct {
	Peer      Key
	Via, Addr netip.AddrPort
	At        bool
}

// to is where ping p's frame goes.
func (p PingTo) to() netip.AddrPort {
	if p.Via.IsValid() {
		return p.Via
	}
	return p.Addr
}

// id is the way ping p measures.
func (p PingTo) id() pathID {
	if p.At {
		return pathID{peer: p.Peer, at: p.Addr}
	}
	return pathID{peer: p.Peer, via: p.Via}
}

// pingBatch is how many pings Pings stages before it sends them: as many as one
// sendmmsg's pieces (a GSO message holds one per ping).
const pingBatch = sendIovecs

// Pings sends the pings ps where Ping takes a system call each: a tick of the
// chooser pings every relayed peer through every relay. It sorts ps by where each
// goes, so that the pings through one relay go as GSO messages (64 datagrams each),
// up to pingBatch to one sendmmsg. It returns how many failed and the first error.
func (n *Node) Pings(ps []PingTo) (failed int, err error) {
	const frame = relayHdr + pingLen // the larger of the two frames
	slices.SortFunc(ps, func(a, b PingTo) int { return a.to().Compare(b.to()) })
	n.pingMu.Lock()
	defer n.pingMu.Unlock()
	if n.pingBuf == nil {
		n.pingBuf = make([]byte, pingBatch*(frame+pingLen))
	}
	now := time.Now()
	for len(ps) > 0 {
		batch := ps[:min(len(ps), pingBatch)]
		ps = ps[len(batch):]
		// The payloads first (their ids registered under one lock), then each
		// frame around its payload.
		pays := n.pingBuf[pingBatch*frame:]
		var ids [pingBatch]pathID
		for i, p := range batch {
			ids[i] = p.id()
		}
		n.newPings(pays, now, ids[:len(batch)])
		var frames [pingBatch][]byte
		for i, p := range batch {
			pay, b := pays[i*pingLen:(i+1)*pingLen], n.pingBuf[i*frame:(i+1)*frame]
			if p.Via.IsValid() {
				frames[i] = n.putRelay(b, p.Peer, pay)
			} else {
				frames[i] = n.putDirect(b, pay)
			}
		}
		// The socket is taken for one batch at a time: Run's relaying waits for
		// a batch, not for a whole tick's pings.
		n.sendMu.Lock()
		for i, p := range batch {
			if !n.conn.Room(1) {
				f, e := n.conn.Send()
				failed, err = failed+f, cmp.Or(err, e)
			}
			if e := n.conn.StageRun(frames[i], p.to()); e != nil {
				failed, err = failed+1, cmp.Or(err, e)
			}
		}
		// Sent before the next batch writes over this one's frames.
		f, e := n.conn.Send()
		n.sendMu.Unlock()
		failed, err = failed+f, cmp.Or(err, e)
	}
	return failed, err
}

// newPings writes a ping payload with a fresh id for each of ids into pays, one
// pingLen after the other, and registers them as sent at now.
func (n *Node) newPings(pays []byte, now time.Time, ids []pathID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if now.Sub(n.pingsSwept) >= pingSweepEvery {
		// Unanswered pings expire in one sweep a second, not one per ping: that
		// scanned every outstanding ping, about 20,000 with 1,000 relayed peers
		// measured through 8 relays, on each of 4,000 pings a second.
		n.pingsSwept = now
		for i, s := range n.pings {
			if now.After(s.due) {
				delete(n.pings, i)
			}
		}
	}
	for i, pid := range ids {
		id := rand.Uint64()
		p := pays[i*pingLen : (i+1)*pingLen]
		p[0] = pPing
		binary.BigEndian.PutUint64(p[1:], id)
		n.pings[id] = pingSent{id: pid, at: now, due: now.Add(5 * time.Second)}
	}
}

// Measured is what the pings to peer k found, through the relay at via (invalid:
// straight).
func (n *Node) Measured(k Key, via netip.AddrPort) Measure {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rtts[pathID{peer: k, via: via}]
}

// Forget drops what the node keeps of peer k: its loopback socket, route and
// measures.
func (n *Node) Forget(k Key) {
	n.mu.Lock()
	l := n.locals[k]
	delete(n.locals, k)
	if l != nil {
		delete(n.standIns, l.addr)
	}
	delete(n.routes, k)
	delete(n.heard, k)
	delete(n.hellos, k)
	delete(n.punches, k)
	delete(n.punchTS, k)
	for id := range n.rtts {
		if id.peer == k {
			delete(n.rtts, id)
		}
	}
	n.mu.Unlock()
	if l != nil {
		_ = l.close()
	}
}
