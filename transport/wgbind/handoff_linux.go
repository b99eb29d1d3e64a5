package wgbind

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// A hand-over between two devices on one key and port: a weftd that stops for a
// new one leaves its device running (HandOver) until the new one's (TakeOver)
// carries the peers' traffic.
//
// Both Binds' sockets are in one SO_REUSEPORT group, and the kernel spreads the
// peers' datagrams over them by address. A peer names the session a datagram
// belongs to by the index our device gave it in its handshake message (the sender
// index of its initiation or response), and each Bind learns the indices its device
// gives (own). While the two are joined, each passes the other, over a local
// datagram socket, the responses, cookie replies and transport messages whose index
// is not its own, and the old one passes on the initiations, so that new sessions
// are the new device's. The old device sends no handshake any more: its sessions
// end with it. It stops once no datagram of its sessions came for handOverQuiet, or
// handOverMax after the new one joined, or handOverJoin after HandOver when none did.
//
// Relayed peers come and go through each weftd's relay node, and the old weftd's
// node stops reading with it (its socket passes to the new node): the new Bind
// passes the old one the relayed datagrams of the old device's sessions. The old
// device sends to relayed peers through its own node while that is open (it sends
// on the same socket), and passes the new one what it sends once its node is
// closed, for the new node to send. Each device has its own stand-in address for a
// relayed peer, so those frames name the peer by its key (RelayPeers).

// Hand-over times.
const (
	handOverJoin  = 5 * time.Second
	handOverQuiet = time.Second
	handOverMax   = 10 * time.Second
	handOverTick  = 50 * time.Millisecond
)

// A cookie reply names our session at offset 4, as a transport message does; a
// response at offset 8.
const msgCookieReply = 3

// handOverHello is the new Bind's first datagram to the old one. v2 frames have a
// kind (v1, never released, had only the socket's).
const handOverHello = "weft wgbind take over v2"

// ownAge is how long an index our device gave stays ours: a WireGuard session is
// refused after 180 s (REJECT_AFTER_TIME), so a handshake's index is long dead by
// then. Learnt indices older than that are dropped every ownSweep handshakes.
const (
	ownAge   = 10 * time.Minute
	ownSweep = 4096
)

// ownIndices are the session indices the Bind's device gave in its handshake
// messages, with when (unix seconds).
type ownIndices struct {
	m sync.Map // uint32 -> int64
	n atomic.Uint64
}

// learn records the sender index of p, a datagram the device sends, when it is a
// handshake initiation or response.
func (o *ownIndices) learn(p []byte) {
	if !isInitiation(p) && !isResponse(p) {
		return
	}
	now := time.Now().Unix()
	o.m.Store(binary.LittleEndian.Uint32(p[4:]), now)
	if o.n.Add(1)%ownSweep == 0 {
		o.m.Range(func(k, v any) bool {
			if now-v.(int64) > int64(ownAge/time.Second) {
				o.m.Delete(k)
			}
			return true
		})
	}
}

func (o *ownIndices) has(idx uint32) bool {
	_, ok := o.m.Load(idx)
	return ok
}

// sessionIndex is the index of our session that p, a datagram from a peer, names;
// ok is false for an initiation (it names none yet) and anything else.
func sessionIndex(p []byte) (idx uint32, ok bool) {
	if len(p) < 16 || p[1]|p[2]|p[3] != 0 {
		return 0, false
	}
	switch p[0] {
	case msgResponse:
		if len(p) != responseLen {
			return 0, false
		}
		return binary.LittleEndian.Uint32(p[8:]), true
	case msgCookieReply, msgTransport:
		return binary.LittleEndian.Uint32(p[4:]), true
	}
	return 0, false
}

// partner is the other Bind of a hand-over, joined by a connected datagram socket.
// A frame is its kind (1 byte), a header of that kind, then the datagram:
//   - frameSocket: the peer's address (16 bytes, IPv4 as mapped) and port (2,
//     big-endian), as our socket got it;
//   - frameRelayed: the key of the relayed peer it came from (32), as our relay
//     node got it;
//   - frameRelayOut: the key of the relayed peer to send it to (32), through the
//     receiver's relay node.
type partner struct {
	c   *net.UnixConn
	old bool // this Bind's device is the one handing over
	// lastOwn: when (unix ns) the old device last got a datagram of its sessions.
	lastOwn atomic.Int64
	passed  atomic.Uint64
	lost    atomic.Uint64 // frames the other could not take now, or not at all
}

// Frame kinds, and the longest header (kind included).
const (
	frameSocket   = 0
	frameRelayed  = 1
	frameRelayOut = 2
	frameHeader   = 1 + 32
)

// RelayPeers is a Relay that names the peer behind each of its stand-in addresses
// and the stand-in of each peer. In a hand-over the two devices' stand-ins for a
// relayed peer differ, and the Binds pass its datagrams by the peer's key; a Bind
// whose Relay is no RelayPeers passes none. PeerOf answers after the relay is
// closed too: the old device goes on after its weftd's relay node.
type RelayPeers interface {
	PeerOf(standIn netip.AddrPort) (key [32]byte, ok bool)
	StandIn(key [32]byte) (standIn netip.AddrPort, ok bool)
}

// handOver is what the Bind keeps of a hand-over. It outlives the Bind's Close
// (wireguard-go closes its Bind before each Open): EndHandOver ends it.
type handOver struct {
	p      atomic.Pointer[partner]
	old    atomic.Bool // the device hands over: it sends no handshake
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	mu     sync.Mutex
	socks  []*net.UnixConn // to close at the end
}

// passes reports whether p, from the peer at from, belongs to the other device of
// a hand-over, and sends it there if so.
func (b *Bind) passes(p []byte, from netip.AddrPort, hdr *[frameHeader]byte) bool {
	pt := b.ho.p.Load()
	if pt == nil || !b.othersOf(pt, p) {
		return false
	}
	hdr[0] = frameSocket
	a16 := from.Addr().As16()
	copy(hdr[1:17], a16[:])
	binary.BigEndian.PutUint16(hdr[17:], from.Port())
	return b.pass(pt, hdr[:19], p)
}

// othersOf reports whether p, a datagram from a peer, is the partner's: it names a
// session not ours, or (the old device's partner makes the new sessions) it is an
// initiation. It notes when the old device last got one of its own.
func (b *Bind) othersOf(pt *partner, p []byte) bool {
	idx, ok := sessionIndex(p)
	switch {
	case ok && b.own.has(idx):
		if pt.old {
			pt.lastOwn.Store(time.Now().UnixNano())
		}
		return false
	case !ok && !(pt.old && isInitiation(p)):
		return false
	}
	return true
}

// passesRelayed is passes for p, relayed from the peer whose stand-in is from.
func (b *Bind) passesRelayed(p []byte, from netip.AddrPort) bool {
	pt := b.ho.p.Load()
	if pt == nil || !b.othersOf(pt, p) {
		return false
	}
	k, ok := b.peerOf(from)
	if !ok {
		return false
	}
	var hdr [frameHeader]byte
	hdr[0] = frameRelayed
	copy(hdr[1:], k[:])
	return b.pass(pt, hdr[:], p)
}

// passesRelayOut reports whether bufs, our device's datagrams for the relayed peer
// whose stand-in is to, go to the new device's relay: our device hands over, the
// new one has joined, and our relay node did not take them (it is closed). It sends
// them there if so.
func (b *Bind) passesRelayOut(bufs [][]byte, to netip.AddrPort) bool {
	pt := b.ho.p.Load()
	if pt == nil || !pt.old {
		return false
	}
	k, ok := b.peerOf(to)
	if !ok {
		return false
	}
	var hdr [frameHeader]byte
	hdr[0] = frameRelayOut
	copy(hdr[1:], k[:])
	for _, p := range bufs {
		if !b.pass(pt, hdr[:], p) {
			return false // the new device has stopped: nobody can send it
		}
	}
	return true
}

// peerOf is the key of the relayed peer whose stand-in is ap.
func (b *Bind) peerOf(ap netip.AddrPort) ([32]byte, bool) {
	if r := b.relay.Load(); r != nil {
		if rp, ok := r.Relay.(RelayPeers); ok {
			return rp.PeerOf(ap)
		}
	}
	return [32]byte{}, false
}

// standIn is our relay's stand-in for the relayed peer k.
func (b *Bind) standIn(k [32]byte) (netip.AddrPort, bool) {
	if r := b.relay.Load(); r != nil {
		if rp, ok := r.Relay.(RelayPeers); ok {
			return rp.StandIn(k)
		}
	}
	return netip.AddrPort{}, false
}

// pass sends the frame of header hdr and datagram p to the partner. A partner
// gone (its socket closed) is forgotten, and p is not passed: it is our device's
// now.
func (b *Bind) pass(pt *partner, hdr, p []byte) bool {
	raw, err := pt.c.SyscallConn()
	if err != nil {
		b.ho.p.CompareAndSwap(pt, nil)
		return false
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		_, serr = unix.SendmsgBuffers(int(fd), [][]byte{hdr, p}, nil, nil, unix.MSG_DONTWAIT)
	}); err != nil {
		serr = err
	}
	switch {
	case serr == nil:
		pt.passed.Add(1)
	case errors.Is(serr, unix.ECONNREFUSED) || errors.Is(serr, net.ErrClosed):
		if b.ho.p.CompareAndSwap(pt, nil) {
			b.log.Info("hand-over: the other device has stopped", zap.Uint64("passed", pt.passed.Load()),
				zap.Uint64("lost", pt.lost.Load()))
		}
		return false
	default: // its queue full (EAGAIN)
		pt.lost.Add(1)
	}
	return true
}

// readPartner hands the device what the partner passes, until its socket closes.
// Each frame must come from a process of our user (SO_PASSCRED).
func (b *Bind) readPartner(pt *partner) {
	defer b.ho.wg.Done()
	buf := make([]byte, frameHeader+bufLen)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	for {
		n, oobn, _, _, err := pt.c.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		if n == 0 || !sameUser(oob[:oobn]) {
			continue
		}
		b.takeFrame(pt, buf[:n])
	}
}

// takeFrame hands the device, or our relay, a frame the partner passed.
func (b *Bind) takeFrame(pt *partner, f []byte) {
	var from netip.AddrPort
	var msg []byte
	switch {
	case f[0] == frameSocket && len(f) > 19:
		from = netip.AddrPortFrom(netip.AddrFrom16([16]byte(f[1:17])).Unmap(), binary.BigEndian.Uint16(f[17:]))
		msg = f[19:]
	case (f[0] == frameRelayed || f[0] == frameRelayOut) && len(f) > frameHeader:
		msg = f[frameHeader:]
		var ok bool
		if from, ok = b.standIn([32]byte(f[1:frameHeader])); !ok {
			b.relayDrops.Add(1) // a peer our relay does not relay (yet)
			return
		}
		if f[0] == frameRelayOut {
			if r := b.relay.Load(); r == nil {
				b.relayDrops.Add(1)
			} else if ok, _ := r.SendRelayed([][]byte{msg}, from); !ok {
				b.relayDrops.Add(1)
			}
			return
		}
	default:
		return
	}
	if pt.old {
		if idx, ok := sessionIndex(msg); ok && b.own.has(idx) {
			pt.lastOwn.Store(time.Now().UnixNano())
		}
	}
	b.deliver(msg, from)
}

// HandOver leaves the Bind's device running for a new device on the same key and
// port (TakeOver with the same name, in the same network namespace): it sends no
// handshake any more, waits handOverJoin for the new one, and then passes it the
// initiations and what belongs to the new device's sessions. done closes when the
// device may stop: no datagram of its sessions came for handOverQuiet, or
// handOverMax passed, or none joined. Close the Bind after done.
func (b *Bind) HandOver(name string) (done <-chan struct{}, err error) {
	if !b.takeRelayed {
		return nil, errors.New("wgbind: a hand-over needs TakeRelayed")
	}
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: "@" + name, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("hand-over socket @%s: %w", name, err)
	}
	if err := setPassCred(ln); err != nil {
		ln.Close()
		return nil, err
	}
	b.ho.keep(ln)
	b.ho.old.Store(true)
	b.mu.Lock()
	if b.stopRetransmits != nil {
		b.stopRetransmits()
		b.stopRetransmits = nil
	}
	b.mu.Unlock()
	ch := make(chan struct{})
	b.ho.wg.Add(1)
	go func() {
		defer b.ho.wg.Done()
		defer close(ch)
		pt, err := b.awaitJoin(ln)
		if err != nil {
			b.log.Info("hand-over: no new device joined", zap.Error(err))
			return
		}
		b.log.Info("hand-over: the new device joined; passing it what is its own")
		joined := time.Now()
		t := time.NewTicker(handOverTick)
		defer t.Stop()
		for {
			select {
			case <-b.ho.closed:
				return
			case now := <-t.C:
				if now.Sub(time.Unix(0, pt.lastOwn.Load())) >= handOverQuiet || now.Sub(joined) >= handOverMax {
					b.log.Info("hand-over: this device stops", zap.Duration("after", now.Sub(joined)),
						zap.Uint64("passed", pt.passed.Load()), zap.Uint64("lost", pt.lost.Load()))
					return
				}
			}
		}
	}()
	return ch, nil
}

// awaitJoin waits for a new Bind's hello on ln, from a process of our user, and
// joins it.
func (b *Bind) awaitJoin(ln *net.UnixConn) (*partner, error) {
	if err := ln.SetReadDeadline(time.Now().Add(handOverJoin)); err != nil {
		return nil, err
	}
	buf := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	for {
		n, oobn, _, from, err := ln.ReadMsgUnix(buf, oob)
		if err != nil {
			return nil, err
		}
		if string(buf[:n]) != handOverHello || from == nil || !sameUser(oob[:oobn]) {
			continue
		}
		raw, err := ln.SyscallConn()
		if err != nil {
			return nil, err
		}
		sa := &unix.SockaddrUnix{Name: from.Name}
		var cerr error
		if err := raw.Control(func(fd uintptr) { cerr = unix.Connect(int(fd), sa) }); err != nil {
			return nil, err
		}
		if cerr != nil {
			return nil, fmt.Errorf("connect to the new device's socket: %w", cerr)
		}
		_ = ln.SetReadDeadline(time.Time{})
		pt := &partner{c: ln, old: true}
		pt.lastOwn.Store(time.Now().UnixNano())
		b.ho.p.Store(pt)
		b.ho.wg.Add(1)
		go b.readPartner(pt)
		return pt, nil
	}
}

// TakeOver joins the Bind to a device handing over under name (HandOver), if one
// does: it reports whether one did. Call it before Open, and EndHandOver after the
// device is closed.
func (b *Bind) TakeOver(name string) (bool, error) {
	if !b.takeRelayed {
		return false, errors.New("wgbind: a hand-over needs TakeRelayed")
	}
	// SO_PASSCRED before connect: the socket gets an address (autobind) the old one
	// can answer to, and frames carry their sender's credentials.
	d := net.Dialer{Control: func(_, _ string, raw syscall.RawConn) error {
		var serr error
		if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1) }); err != nil {
			return err
		}
		return serr
	}}
	nc, err := d.Dial("unixgram", "@"+name)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("hand-over socket @%s: %w", name, err)
	}
	c := nc.(*net.UnixConn)
	if _, err := c.Write([]byte(handOverHello)); err != nil {
		c.Close()
		if errors.Is(err, syscall.ECONNREFUSED) {
			return false, nil
		}
		return false, fmt.Errorf("hand-over socket @%s: %w", name, err)
	}
	b.ho.keep(c)
	pt := &partner{c: c}
	b.ho.p.Store(pt)
	b.ho.wg.Add(1)
	go b.readPartner(pt)
	return true, nil
}

// Passed counts the datagrams passed to the other device of a hand-over, and those
// lost on the way (its queue full, or it stopped).
func (b *Bind) Passed() (passed, lost uint64) {
	if pt := b.ho.p.Load(); pt != nil {
		return pt.passed.Load(), pt.lost.Load()
	}
	return 0, 0
}

func (h *handOver) keep(c *net.UnixConn) {
	h.mu.Lock()
	h.socks = append(h.socks, c)
	h.mu.Unlock()
}

// EndHandOver closes a hand-over's sockets and waits for its goroutines. Call it
// after the device is closed.
func (b *Bind) EndHandOver() {
	b.ho.once.Do(func() { close(b.ho.closed) })
	b.ho.p.Store(nil)
	b.ho.mu.Lock()
	for _, c := range b.ho.socks {
		_ = c.Close()
	}
	b.ho.socks = nil
	b.ho.mu.Unlock()
	b.ho.wg.Wait()
}

// handshakeHeld reports whether bufs is a handshake message the device may not
// send: it hands over, and its sessions end with it.
func (b *Bind) handshakeHeld(bufs [][]byte) bool {
	return b.ho.old.Load() && len(bufs) == 1 && (isInitiation(bufs[0]) || isResponse(bufs[0]))
}

func setPassCred(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("SO_PASSCRED: %w", serr)
	}
	return nil
}

// sameUser reports whether oob carries the credentials of a process of our user.
func sameUser(oob []byte) bool {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return false
	}
	for _, m := range msgs {
		if cred, err := unix.ParseUnixCredentials(&m); err == nil {
			return int(cred.Uid) == os.Geteuid()
		}
	}
	return false
}
