package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/curve25519"

	"github.com/weftnet/weft/transport"
)

// host is a Node and a UDP socket on loopback that plays its WireGuard device.
type host struct {
	n    *Node
	dev  *net.UDPConn
	pub  Key
	priv [32]byte
}

func newHost(t *testing.T, seen func(Key) netip.AddrPort) *host {
	t.Helper()
	dev, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var priv [32]byte
	if _, err := rand.Read(priv[:]); err != nil {
		t.Fatal(err)
	}
	pub, _ := curve25519.X25519(priv[:], curve25519.Basepoint)
	n, err := Listen(Config{Port: 0, Private: priv, WGPort: dev.LocalAddr().(*net.UDPAddr).Port, SeenAt: seen})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = dev.Close() })
	return &host{n: n, dev: dev, pub: Key(pub), priv: priv}
}

func (h *host) addr() netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(h.n.Port()))
}

// await polls cond every 5 ms for at most 2 s.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 2 s", what)
}

func readDev(t *testing.T, h *host) ([]byte, netip.AddrPort) {
	t.Helper()
	buf := make([]byte, 2048)
	_ = h.dev.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, from, err := h.dev.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("device: %v", err)
	}
	return buf[:n], from
}

// TestRelayedDatagrams: a and b say hello to r; a WireGuard datagram a's device sends
// to b's loopback endpoint reaches b's device unchanged, from b's loopback socket
// for a, and b's answer to that source reaches a's device; r counts both and holds
// nothing of theirs but the registrations.
func TestRelayedDatagrams(t *testing.T) {
	wgSeen := netip.MustParseAddrPort("203.0.113.2:40001")
	r := newHost(t, func(Key) netip.AddrPort { return wgSeen })
	a, b := newHost(t, nil), newHost(t, nil)
	for _, h := range []*host{a, b} {
		if err := h.n.Hello(r.pub, r.addr()); err != nil {
			t.Fatal(err)
		}
		await(t, "hello answered", func() bool { return h.n.Seen()[r.pub].At.After(time.Time{}) })
		s := h.n.Seen()[r.pub]
		if s.Relay != h.addr() || s.WireGuard != wgSeen {
			t.Fatalf("seen by r: %+v, want relay socket %v and WireGuard %v", s, h.addr(), wgSeen)
		}
	}
	epB, err := a.n.Endpoint(b.pub)
	if err != nil {
		t.Fatal(err)
	}
	a.n.SetRoute(b.pub, r.addr())
	msg := append([]byte{4, 0, 0, 0}, bytes.Repeat([]byte{0xab}, 1400)...)
	if _, err := a.dev.WriteToUDPAddrPort(msg, epB); err != nil {
		t.Fatal(err)
	}
	got, from := readDev(t, b)
	if !bytes.Equal(got, msg) {
		t.Fatalf("b's device got %d bytes, want the %d sent", len(got), len(msg))
	}
	if k, ok := b.n.IsEndpoint(from); !ok || k != a.pub {
		t.Fatalf("b's device got it from %v, not b's loopback socket for a", from)
	}
	// b answers where it came from; b has no route of its own: back by r.
	reply := []byte{2, 0, 0, 0, 9, 9, 9}
	if _, err := b.dev.WriteToUDPAddrPort(reply, from); err != nil {
		t.Fatal(err)
	}
	if got, from := readDev(t, a); !bytes.Equal(got, reply) || from != epB {
		t.Fatalf("a's device got %x from %v, want %x from %v", got, from, reply, epB)
	}
	if p, by := r.n.Forwarded(); p != 2 || by != uint64(len(msg)+len(reply)) {
		t.Fatalf("r forwarded %d packets, %d bytes; want 2, %d", p, by, len(msg)+len(reply))
	}
	// A ping through r measures the way.
	if err := a.n.Ping(b.pub, r.addr(), netip.AddrPort{}); err != nil {
		t.Fatal(err)
	}
	await(t, "ping through r", func() bool { return !a.n.Measured(b.pub, r.addr()).At.IsZero() })
	// And straight.
	if err := a.n.Ping(b.pub, netip.AddrPort{}, b.addr()); err != nil {
		t.Fatal(err)
	}
	await(t, "ping straight", func() bool { return !a.n.Measured(b.pub, netip.AddrPort{}).At.IsZero() })
}

// TestRelayRefuses: r relays only between hosts that said hello, says so to a sender
// when the peer is unknown, and drops a hello whose MAC is not the sender's key's, a
// replayed one, and garbage.
func TestRelayRefuses(t *testing.T) {
	r, a, b := newHost(t, nil), newHost(t, nil), newHost(t, nil)
	// a not registered: its datagrams are dropped.
	ep, _ := a.n.Endpoint(b.pub)
	a.n.SetRoute(b.pub, r.addr())
	_, _ = a.dev.WriteToUDPAddrPort([]byte{4, 0, 0, 0, 1}, ep)
	await(t, "drop of an unregistered sender", func() bool { return r.n.Dropped() == 1 })
	// a registered, b not: r answers no peer.
	_ = a.n.Hello(r.pub, r.addr())
	await(t, "hello", func() bool { return !a.n.Seen()[r.pub].At.IsZero() })
	_ = a.n.Ping(b.pub, r.addr(), netip.AddrPort{})
	await(t, "no peer", func() bool { return !a.n.Measured(b.pub, r.addr()).NoPeer.IsZero() })
	if p, _ := r.n.Forwarded(); p != 0 {
		t.Fatalf("r forwarded %d packets", p)
	}
	// A hello in b's name with a MAC of another key: dropped, b not registered.
	raw, _ := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(r.addr()))
	defer raw.Close()
	forged := make([]byte, helloLen)
	putHeader(forged, tHello)
	copy(forged[5:], b.pub[:])
	before := r.n.Dropped()
	for _, f := range [][]byte{forged, []byte("WFT1"), []byte("garbage"), append([]byte("WFT1\x09"), make([]byte, 80)...)} {
		_, _ = raw.Write(f)
	}
	await(t, "drops", func() bool { return r.n.Dropped() == before+4 })
	r.n.mu.Lock()
	_, reg := r.n.regs[b.pub]
	r.n.mu.Unlock()
	if reg {
		t.Fatal("a forged hello registered b")
	}
}

// FuzzHandle: no frame crashes a node.
func FuzzHandle(f *testing.F) {
	f.Add([]byte("WFT1\x01"))
	f.Add(append([]byte("WFT1\x03"), make([]byte, 70)...))
	f.Add(append([]byte("WFT1\x04"), make([]byte, 50)...))
	f.Add(append([]byte("WFT1\x05"), make([]byte, noPeerLen)...))
	f.Add(append(append([]byte("WFT1\x04"), make([]byte, 33)...), pPong, 1, 2, 3, 4, 5, 6, 7, 8))
	var priv [32]byte
	priv[0] = 1
	n, err := Listen(Config{Port: 0, Private: priv, WGPort: 9})
	if err != nil {
		f.Fatal(err)
	}
	defer n.Close()
	src := netip.MustParseAddrPort("127.0.0.1:9")
	f.Fuzz(func(t *testing.T, b []byte) {
		n.handle(b, src)
	})
}

// TestNoPeerAuthenticated: a relay's "no peer" counts only from the key we said hello
// to, from where we said it, with its MAC and a time newer than the last: forged,
// replayed and strangers' answers are dropped and counted, and leave the measure as
// it was.
func TestNoPeerAuthenticated(t *testing.T) {
	r, a, b, c := newHost(t, nil), newHost(t, nil), newHost(t, nil), newHost(t, nil)
	_ = a.n.Hello(r.pub, r.addr())
	await(t, "hello", func() bool { return !a.n.Seen()[r.pub].At.IsZero() })
	// frame is a "no peer" about b from the node of key from, MACed with mac.
	frame := func(from Key, ts uint64, mk [32]byte) []byte {
		var f [noPeerLen]byte
		putHeader(f[:], tNoPeer)
		copy(f[5:], from[:])
		copy(f[37:], b.pub[:])
		binary.BigEndian.PutUint64(f[69:], ts)
		m := mac(mk, f[:noPeerLen-macLen])
		copy(f[noPeerLen-macLen:], m[:])
		return f[:]
	}
	noPeer := func() time.Time { return a.n.Measured(b.pub, r.addr()).NoPeer }
	rKey, _ := r.n.macKey(a.pub)
	cKey, _ := c.n.macKey(a.pub)
	now := uint64(time.Now().UnixNano())
	// A valid one from r: taken.
	_ = r.n.send(frame(r.pub, now, rKey), a.addr())
	await(t, "no peer", func() bool { return !noPeer().IsZero() })
	first := noPeer()
	for _, tc := range []struct {
		name string
		from *host
		f    []byte
	}{
		{"replayed", r, frame(r.pub, now, rKey)},
		{"older", r, frame(r.pub, now-1, rKey)},
		{"forged MAC", r, frame(r.pub, now+1, [32]byte{})},
		{"a stranger's key, its own MAC", c, frame(c.pub, now+2, cKey)},
		{"r's key from a stranger's address", c, frame(r.pub, now+3, rKey)},
		{"short", r, frame(r.pub, now+4, rKey)[:noPeerLen-1]},
	} {
		before := a.n.Dropped()
		_ = tc.from.n.send(tc.f, a.addr())
		await(t, tc.name+": dropped", func() bool { return a.n.Dropped() == before+1 })
		if got := noPeer(); !got.Equal(first) {
			t.Fatalf("%s: no peer moved from %v to %v", tc.name, first, got)
		}
	}
	// A newer valid one: taken again.
	_ = r.n.send(frame(r.pub, now+5, rKey), a.addr())
	await(t, "a newer no peer", func() bool { return noPeer().After(first) })
}

// inProcDevice plays a device in process (Device): it keeps what it is handed.
type inProcDevice struct {
	got  chan []byte
	from chan netip.AddrPort
	full atomic.Bool // refuses everything, as a device whose queue is full
}

func (d *inProcDevice) Deliver(p []byte, from netip.AddrPort) bool {
	if d.full.Load() {
		return false
	}
	d.got <- bytes.Clone(p)
	d.from <- from
	return true
}

// TestSendRelayedInProcess: with a device in process on both ends, a batch a's device
// sends to its stand-in for b (runs of one size, a shorter datagram, another size)
// reaches b's device whole and in order, from b's stand-in for a, through r, with no
// loopback leg; an address that stands for no peer is not taken; a device that
// refuses a datagram makes a counted drop.
func TestSendRelayedInProcess(t *testing.T) {
	r := newHost(t, nil)
	a, b := newHost(t, nil), newHost(t, nil)
	devB := &inProcDevice{got: make(chan []byte, 256), from: make(chan netip.AddrPort, 256)}
	b.n.SetDevice(devB)
	for _, h := range []*host{a, b} {
		if err := h.n.Hello(r.pub, r.addr()); err != nil {
			t.Fatal(err)
		}
		await(t, "hello answered", func() bool { return h.n.Seen()[r.pub].At.After(time.Time{}) })
	}
	epB, err := a.n.Endpoint(b.pub)
	if err != nil {
		t.Fatal(err)
	}
	a.n.SetRoute(b.pub, r.addr())
	var sent [][]byte
	for i := range 100 {
		size := 1200
		switch {
		case i%40 == 39:
			size = 200
		case i >= 80:
			size = 900
		}
		sent = append(sent, append([]byte{4, 0, 0, 0}, bytes.Repeat([]byte{byte(i)}, size)...))
	}
	if ok, err := a.n.SendRelayed(sent, epB); !ok || err != nil {
		t.Fatalf("SendRelayed to the stand-in for b: taken %v, %v", ok, err)
	}
	epA, err := b.n.Endpoint(a.pub)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range sent {
		select {
		case got := <-devB.got:
			if from := <-devB.from; from != epA {
				t.Fatalf("datagram %d from %v, want b's stand-in for a %v", i, from, epA)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("datagram %d: %d bytes starting %x, want %d starting %x", i, len(got), got[:5], len(want), want[:5])
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("b's device got %d of %d datagrams", i, len(sent))
		}
	}
	if p, _ := r.n.Forwarded(); p != uint64(len(sent)) {
		t.Fatalf("r forwarded %d, want %d", p, len(sent))
	}
	// Nothing went to b's loopback device socket.
	_ = b.dev.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, _, err := b.dev.ReadFromUDPAddrPort(make([]byte, 2048)); err == nil {
		t.Fatalf("b's loopback device socket got %d bytes; want the in-process leg only", n)
	}
	// An address that stands for no peer is the caller's to send.
	if ok, _ := a.n.SendRelayed(sent[:1], netip.MustParseAddrPort("127.0.0.1:9")); ok {
		t.Fatal("SendRelayed took an address that stands for no peer")
	}
	// A device that refuses: counted.
	devB.full.Store(true)
	before := b.n.Dropped()
	if ok, err := a.n.SendRelayed(sent[:3], epB); !ok || err != nil {
		t.Fatalf("SendRelayed: %v, %v", ok, err)
	}
	await(t, "refused datagrams counted", func() bool { return b.n.Dropped() == before+3 })
}

// TestPunchNow: b's "punch now" through r reaches a, which keeps where b's path
// socket is seen; punches forged, replayed, older, naming no address, with a
// key b does not share with a or sent straight rather than through a relay are dropped and
// counted, and change nothing. Pings a sends to b's address then answer
// (MeasuredAt), apart from the direct way's.
func TestPunchNow(t *testing.T) {
	r, a, b, c := newHost(t, nil), newHost(t, nil), newHost(t, nil), newHost(t, nil)
	for _, h := range []*host{a, b, c} {
		_ = h.n.Hello(r.pub, r.addr())
		await(t, "hello", func() bool { return !h.n.Seen()[r.pub].At.IsZero() })
	}
	if err := b.n.PunchNow(a.pub, r.addr(), b.addr()); err != nil {
		t.Fatal(err)
	}
	await(t, "punch now", func() bool { return a.n.PunchOf(b.pub).Addr == b.addr() })
	first := a.n.PunchOf(b.pub)
	// payload is a punch from b, MACed with mk, naming addr.
	bKey, _ := b.n.macKey(a.pub)
	cKey, _ := c.n.macKey(a.pub)
	payload := func(ts uint64, addr netip.AddrPort, mk [32]byte) []byte {
		var p [punchLen]byte
		p[0] = pPunch
		binary.BigEndian.PutUint64(p[1:], ts)
		putAddr(p[9:], addr)
		m := mac(mk, p[:punchLen-macLen])
		copy(p[punchLen-macLen:], m[:])
		return p[:]
	}
	now := uint64(time.Now().UnixNano())
	elsewhere := netip.MustParseAddrPort("127.0.0.1:9")
	for _, tc := range []struct {
		name string
		send func() error
	}{
		{"forged MAC", func() error { return b.n.sendRelay(a.pub, r.addr(), payload(now+1, elsewhere, [32]byte{})) }},
		{"older", func() error { return b.n.sendRelay(a.pub, r.addr(), payload(1, elsewhere, bKey)) }},
		{"no address", func() error { return b.n.sendRelay(a.pub, r.addr(), payload(now+2, netip.AddrPort{}, bKey)) }},
		{"b's punch MACed with another host's key", func() error { return b.n.sendRelay(a.pub, r.addr(), payload(now+3, elsewhere, cKey)) }},
		{"straight, not through a relay", func() error { return b.n.sendDirect(a.addr(), payload(now+4, elsewhere, bKey)) }},
	} {
		before, pd := a.n.Dropped(), a.n.PunchDrops()
		if err := tc.send(); err != nil {
			t.Fatal(err)
		}
		await(t, tc.name+": dropped", func() bool { return a.n.Dropped() == before+1 && a.n.PunchDrops() == pd+1 })
		if got := a.n.PunchOf(b.pub); got != first {
			t.Fatalf("%s: the punch moved from %+v to %+v", tc.name, first, got)
		}
	}
	// A replay of a valid one, captured: dropped too.
	valid := payload(now+5, elsewhere, bKey)
	if err := b.n.sendRelay(a.pub, r.addr(), valid); err != nil {
		t.Fatal(err)
	}
	await(t, "a newer punch", func() bool { return a.n.PunchOf(b.pub).Addr == elsewhere })
	pd := a.n.PunchDrops()
	_ = b.n.sendRelay(a.pub, r.addr(), valid)
	await(t, "replay dropped", func() bool { return a.n.PunchDrops() == pd+1 })
	// Pings at b's path socket answer, measured on their own.
	if err := a.n.PingAt(b.pub, b.addr()); err != nil {
		t.Fatal(err)
	}
	await(t, "ping at b's address", func() bool { return !a.n.MeasuredAt(b.pub, b.addr()).At.IsZero() })
	if !a.n.Measured(b.pub, netip.AddrPort{}).At.IsZero() {
		t.Fatal("a ping at the punched address counted as the direct way's")
	}
}

// TestPingsExpire: pings without an answer past their due are dropped in one sweep
// a second, not kept for ever nor scanned on every ping.
func TestPingsExpire(t *testing.T) {
	var priv [32]byte
	priv[0] = 2
	n, err := Listen(Config{Port: 0, Private: priv, WGPort: 9})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	to := netip.MustParseAddrPort("127.0.0.1:9")
	for range 100 {
		_ = n.Ping(Key{1}, netip.AddrPort{}, to)
	}
	n.mu.Lock()
	if len(n.pings) != 100 {
		t.Fatalf("%d pings outstanding, want 100", len(n.pings))
	}
	for id, s := range n.pings {
		s.due = time.Now().Add(-time.Second) // all past due
		n.pings[id] = s
	}
	n.pingsSwept = time.Now().Add(time.Hour) // the last sweep is not a second old
	n.mu.Unlock()
	_ = n.Ping(Key{1}, netip.AddrPort{}, to) // no sweep due: none dropped
	n.mu.Lock()
	kept := len(n.pings)
	n.pingsSwept = time.Now().Add(-pingSweepEvery)
	n.mu.Unlock()
	if kept != 101 {
		t.Fatalf("%d pings outstanding with no sweep due, want 101", kept)
	}
	_ = n.Ping(Key{1}, netip.AddrPort{}, to) // a sweep due: the past-due go
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.pings) != 2 {
		t.Fatalf("%d pings outstanding after the sweep, want the 2 not past due", len(n.pings))
	}
}

// TestPings: a batch of pings over three times pingBatch, to peers through a relay,
// straight to their relay sockets and straight to an address named as a NAT's (At),
// is answered ping by ping (none is left waiting) and measured on each way, as
// Ping's are.
func TestPings(t *testing.T) {
	r, a := newHost(t, nil), newHost(t, nil)
	peers := make([]*host, 4)
	for i := range peers {
		peers[i] = newHost(t, nil)
	}
	for _, h := range append([]*host{a}, peers...) {
		if err := h.n.Hello(r.pub, r.addr()); err != nil {
			t.Fatal(err)
		}
		await(t, "hello answered", func() bool { return h.n.Seen()[r.pub].At.After(time.Time{}) })
	}
	var ps []PingTo
	for len(ps) < 3*pingBatch+10 {
		for _, b := range peers {
			ps = append(ps, PingTo{Peer: b.pub, Via: r.addr()}, PingTo{Peer: b.pub, Addr: b.addr()},
				PingTo{Peer: b.pub, Addr: b.addr(), At: true})
		}
	}
	if failed, err := a.n.Pings(ps); failed > 0 || err != nil {
		t.Fatalf("%d of %d pings failed: %v", failed, len(ps), err)
	}
	await(t, fmt.Sprintf("all %d pings answered", len(ps)), func() bool {
		a.n.mu.Lock()
		defer a.n.mu.Unlock()
		return len(a.n.pings) == 0
	})
	for i, b := range peers {
		if a.n.Measured(b.pub, r.addr()).At.IsZero() || a.n.Measured(b.pub, netip.AddrPort{}).At.IsZero() ||
			a.n.MeasuredAt(b.pub, b.addr()).At.IsZero() {
			t.Errorf("peer %d: a way not measured", i)
		}
	}
	if m := a.n.MeasuredAt(peers[0].pub, r.addr()); !m.At.IsZero() {
		t.Fatalf("measured at an address never pinged: %+v", m)
	}
}

// TestRegistrationsKept: a relay's registrations, given to the next node on its key
// (a restart), have it relay at once for the hosts that said hello to the first,
// without a new hello; one older than a registration lives is left out.
func TestRegistrationsKept(t *testing.T) {
	r, a, b := newHost(t, nil), newHost(t, nil), newHost(t, nil)
	for _, h := range []*host{a, b} {
		if err := h.n.Hello(r.pub, r.addr()); err != nil {
			t.Fatal(err)
		}
		await(t, "hello answered", func() bool { return h.n.Seen()[r.pub].At.After(time.Time{}) })
	}
	regs := r.n.Registrations()
	want := map[Key]netip.AddrPort{a.pub: a.addr(), b.pub: b.addr()}
	if len(regs) != 2 {
		t.Fatalf("r's registrations: %+v, want a's and b's", regs)
	}
	for _, g := range regs {
		if want[g.Key] != g.Addr || g.TS == 0 || time.Since(g.At) > time.Minute {
			t.Fatalf("r's registration %+v, want %v, a hello's time and when", g, want[g.Key])
		}
	}
	if err := r.n.Close(); err != nil {
		t.Fatal(err)
	}
	stale := Registration{Key: Key{1}, Addr: netip.MustParseAddrPort("127.0.0.1:9"), At: time.Now().Add(-regTTL - time.Second), TS: 1}
	r2, err := Listen(Config{Private: r.priv, Registrations: append(regs, stale)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r2.Run(context.Background()) }()
	t.Cleanup(func() { _ = r2.Close(); <-done })
	if got := r2.Registrations(); len(got) != 2 {
		t.Fatalf("the next node's registrations: %+v, want a's and b's, not the stale one", got)
	}
	epB, err := a.n.Endpoint(b.pub)
	if err != nil {
		t.Fatal(err)
	}
	a.n.SetRoute(b.pub, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(r2.Port())))
	msg := append([]byte{4, 0, 0, 0}, bytes.Repeat([]byte{0xcd}, 200)...)
	if _, err := a.dev.WriteToUDPAddrPort(msg, epB); err != nil {
		t.Fatal(err)
	}
	if got, _ := readDev(t, b); !bytes.Equal(got, msg) {
		t.Fatalf("b's device got %x, want a's datagram through the next node", got)
	}
	if p, _ := r2.Forwarded(); p != 1 {
		t.Fatalf("the next node forwarded %d, want 1", p)
	}
}

// TestStandInsAfterClose: a node names the peers of its loopback addresses, and
// their addresses, after Close too (a device handing over goes on after it).
func TestStandInsAfterClose(t *testing.T) {
	a, b := newHost(t, nil), newHost(t, nil)
	ep, err := a.n.Endpoint(b.pub)
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		if k, ok := a.n.PeerOf(ep); !ok || k != b.pub {
			t.Fatalf("%s: PeerOf(%v) = %x, %v; want b's key", when, ep, k[:4], ok)
		}
		if got, ok := a.n.StandIn(b.pub); !ok || got != ep {
			t.Fatalf("%s: StandIn(b) = %v, %v; want %v", when, got, ok, ep)
		}
		if _, ok := a.n.StandIn(Key{7}); ok {
			t.Fatalf("%s: a stand-in for a key never relayed", when)
		}
	}
	check("open")
	if err := a.n.Close(); err != nil {
		t.Fatal(err)
	}
	check("closed")
}

// TestHandKeepsWaiting: a node handed on stops reading, what reaches its socket
// then waits there, and the next node goes on with the socket and relays it; a
// socket unlike the one asked for is refused.
func TestHandKeepsWaiting(t *testing.T) {
	r, a, b := newHost(t, nil), newHost(t, nil), newHost(t, nil)
	for _, h := range []*host{a, b} {
		if err := h.n.Hello(r.pub, r.addr()); err != nil {
			t.Fatal(err)
		}
		await(t, "hello answered", func() bool { return h.n.Seen()[r.pub].At.After(time.Time{}) })
	}
	port := r.n.Port()
	f, err := r.n.Hand() // returns once r's Run has
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	regs := r.n.Registrations()
	epB, err := a.n.Endpoint(b.pub)
	if err != nil {
		t.Fatal(err)
	}
	a.n.SetRoute(b.pub, r.addr())
	msg := append([]byte{4, 0, 0, 0}, bytes.Repeat([]byte{0xab}, 100)...)
	if _, err := a.dev.WriteToUDPAddrPort(msg, epB); err != nil {
		t.Fatal(err)
	}
	if err := r.n.Close(); err != nil {
		t.Fatal(err)
	}
	if p, _ := r.n.Forwarded(); p != 0 {
		t.Fatalf("the handed node forwarded %d after Hand, want 0", p)
	}
	for _, bad := range []Config{
		{Port: port + 1, Private: r.priv, From: f},
		{Port: port, Addr: netip.MustParseAddr("127.0.0.2"), Private: r.priv, From: f},
	} {
		if n, err := Listen(bad); !errors.Is(err, transport.ErrSocket) {
			if n != nil {
				n.Close()
			}
			t.Fatalf("Listen(port %d, addr %v) with the handed socket: %v, want ErrSocket", bad.Port, bad.Addr, err)
		}
	}
	r2, err := Listen(Config{Port: port, Private: r.priv, From: f, Registrations: regs})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r2.Run(context.Background()) }()
	t.Cleanup(func() { _ = r2.Close(); <-done })
	if r2.Port() != port {
		t.Fatalf("the next node listens on %d, want %d", r2.Port(), port)
	}
	if got, _ := readDev(t, b); !bytes.Equal(got, msg) {
		t.Fatalf("b's device got %x, want what waited in the handed socket", got)
	}
	if p, _ := r2.Forwarded(); p != 1 {
		t.Fatalf("the next node forwarded %d, want 1", p)
	}
}
