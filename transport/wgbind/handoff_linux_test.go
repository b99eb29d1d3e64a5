package wgbind

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/conn"
)

func handshake(typ byte, sender uint32) []byte {
	n := initiationLen
	if typ == msgResponse {
		n = responseLen
	}
	p := make([]byte, n)
	p[0] = typ
	binary.LittleEndian.PutUint32(p[4:], sender)
	return p
}

// collect reads every receive function of fns into out until the Bind closes.
func collect(fns []conn.ReceiveFunc, out chan<- []byte, wg *sync.WaitGroup) {
	for _, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			packets, sizes, eps := make([][]byte, batch), make([]int, batch), make([]conn.Endpoint, batch)
			for i := range packets {
				packets[i] = make([]byte, 2048)
			}
			for {
				n, err := fn(packets, sizes, eps)
				if err != nil {
					return
				}
				for i := range n {
					out <- append([]byte(nil), packets[i][:sizes[i]]...)
				}
			}
		}()
	}
}

// TestHandOver: two Binds on one port, the old one handing over. A peer's
// datagrams, from many source ports so that the kernel spreads them over both
// sockets, reach the device whose session they name, whichever socket took them;
// initiations reach the new device; the old one sends no handshake; and the old one
// is let go once nothing of its sessions comes.
func TestHandOver(t *testing.T) {
	name := fmt.Sprintf("weft-test-handover-%d", os.Getpid())
	log := zap.NewNop()
	old := New(log, nil)
	old.TakeRelayed(nil)
	var wg sync.WaitGroup // the receiving goroutines, ended by the Binds' Close
	t.Cleanup(wg.Wait)
	oldFns, port, err := old.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { old.Close(); old.EndHandOver() })

	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	peerEP, err := old.ParseEndpoint(peer.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	const oldIdx, newIdx = 0x1111, 0x2222
	if err := old.Send([][]byte{handshake(msgInitiation, oldIdx)}, peerEP); err != nil {
		t.Fatal(err)
	}
	done, err := old.HandOver(name)
	if err != nil {
		t.Fatal(err)
	}

	nb := New(log, nil)
	nb.TakeRelayed(nil)
	joined, err := nb.TakeOver(name)
	if err != nil || !joined {
		t.Fatalf("TakeOver: %v, %v", joined, err)
	}
	newFns, newPort, err := nb.Open(port)
	if err != nil {
		t.Fatalf("open beside the old Bind on port %d: %v", port, err)
	}
	t.Cleanup(func() { nb.Close(); nb.EndHandOver() })
	if newPort != port {
		t.Fatalf("new Bind on port %d, want %d", newPort, port)
	}
	if err := nb.Send([][]byte{handshake(msgResponse, newIdx)}, peerEP); err != nil {
		t.Fatal(err)
	}
	// The old device's handshakes are held; its transport messages go.
	if err := old.Send([][]byte{handshake(msgInitiation, 0x3333)}, peerEP); err != nil {
		t.Fatal(err)
	}
	if err := old.Send([][]byte{transportMsg(7, 1)}, peerEP); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	var gotTypes []byte
	for range 3 {
		if err := peer.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, err := peer.Read(buf)
		if err != nil {
			t.Fatalf("the peer got %v, then: %v", gotTypes, err)
		}
		gotTypes = append(gotTypes, buf[0])
		if n > 0 && buf[0] == msgTransport {
			break
		}
	}
	if want := []byte{msgInitiation, msgResponse, msgTransport}; string(gotTypes) != string(want) {
		t.Fatalf("the peer got message types %v, want %v (the old device's initiation after HandOver held)", gotTypes, want)
	}

	oldGot, newGot := make(chan []byte, 1024), make(chan []byte, 1024)
	collect(oldFns, oldGot, &wg)
	collect(newFns, newGot, &wg)

	// Each of 16 source ports sends one transport message of each session and one
	// initiation.
	const sources = 16
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(port)}
	for i := range sources {
		s, err := net.DialUDP("udp4", nil, to)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range [][]byte{transportMsg(oldIdx, uint64(i)), transportMsg(newIdx, uint64(i)), handshake(msgInitiation, uint32(0x4000+i))} {
			if _, err := s.Write(p); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
	}
	count := func(ch <-chan []byte, want func([]byte) bool, n int, who string) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for got := 0; got < n; got++ {
			select {
			case p := <-ch:
				if !want(p) {
					t.Fatalf("the %s device got a message of type %d, index %#x", who, p[0], binary.LittleEndian.Uint32(p[4:]))
				}
			case <-timeout:
				t.Fatalf("the %s device got %d of its %d messages", who, got, n)
			}
		}
	}
	count(oldGot, func(p []byte) bool { return p[0] == msgTransport && binary.LittleEndian.Uint32(p[4:]) == oldIdx }, sources, "old")
	count(newGot, func(p []byte) bool {
		return p[0] == msgInitiation || p[0] == msgTransport && binary.LittleEndian.Uint32(p[4:]) == newIdx
	}, 2*sources, "new")
	passedOld, lostOld := old.Passed()
	passedNew, lostNew := nb.Passed()
	if passedOld+passedNew == 0 || lostOld+lostNew != 0 {
		t.Errorf("passed %d (old) and %d (new), lost %d and %d: want some passed (both sockets took datagrams), none lost",
			passedOld, passedNew, lostOld, lostNew)
	}

	select {
	case <-done:
	case <-time.After(handOverMax + 5*time.Second):
		t.Fatal("the old Bind was not let go")
	}
	old.Close()
	old.EndHandOver()
	// The old one gone, the new one takes what it cannot place.
	s, err := net.DialUDP("udp4", nil, to)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Write(transportMsg(oldIdx, 99)); err != nil {
		t.Fatal(err)
	}
	count(newGot, func(p []byte) bool { return binary.LittleEndian.Uint32(p[4:]) == oldIdx }, 1, "new")
}

// TestTakeOverNone: without a device handing over, TakeOver reports none.
func TestTakeOverNone(t *testing.T) {
	b := New(zap.NewNop(), nil)
	b.TakeRelayed(nil)
	ok, err := b.TakeOver(fmt.Sprintf("weft-test-none-%d", os.Getpid()))
	if err != nil || ok {
		t.Fatalf("TakeOver: %v, %v; want false, nil", ok, err)
	}
	b.EndHandOver()
}

func TestSessionIndex(t *testing.T) {
	for _, c := range []struct {
		name string
		p    []byte
		idx  uint32
		ok   bool
	}{
		{"transport", transportMsg(5, 1), 5, true},
		{"response", func() []byte { p := handshake(msgResponse, 1); binary.LittleEndian.PutUint32(p[8:], 9); return p }(), 9, true},
		{"cookie reply", func() []byte { p := make([]byte, 64); p[0] = msgCookieReply; p[4] = 3; return p }(), 3, true},
		{"initiation", handshake(msgInitiation, 1), 0, false},
		{"short", []byte{4, 0, 0, 0, 1}, 0, false},
		{"response of a wrong size", append(handshake(msgResponse, 1), 0), 0, false},
		{"type with high bytes", func() []byte { p := transportMsg(5, 1); p[2] = 1; return p }(), 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			idx, ok := sessionIndex(c.p)
			if idx != c.idx || ok != c.ok {
				t.Fatalf("sessionIndex = %#x, %v; want %#x, %v", idx, ok, c.idx, c.ok)
			}
		})
	}
}

// tableRelay is a relay node's stand-ins as a table, recording what the device sends
// through it (the real node is tested in transport/relay and the sites e2e).
type tableRelay struct {
	mu       sync.Mutex
	standIns map[netip.AddrPort][32]byte
	sent     []relayedSend
	closed   bool // sends nothing, as a closed relay node
}

type relayedSend struct {
	to netip.AddrPort
	p  []byte
}

func (r *tableRelay) SendRelayed(bufs [][]byte, to netip.AddrPort) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.standIns[to]; !ok || r.closed {
		return false, nil
	}
	for _, p := range bufs {
		r.sent = append(r.sent, relayedSend{to, append([]byte(nil), p...)})
	}
	return true, nil
}

func (r *tableRelay) PeerOf(ap netip.AddrPort) ([32]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.standIns[ap]
	return k, ok
}

func (r *tableRelay) StandIn(k [32]byte) (netip.AddrPort, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ap, pk := range r.standIns {
		if pk == k {
			return ap, true
		}
	}
	return netip.AddrPort{}, false
}

func (r *tableRelay) await(t *testing.T, n int) []relayedSend {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		got := slices.Clone(r.sent)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
	}
	t.Fatalf("the relay sent fewer than %d datagrams", n)
	return nil
}

// TestHandOverRelayed: a relayed peer has a stand-in address of its own on each
// side of a hand-over. What the new device's relay brings for the old device's
// session reaches the old device from the old stand-in; what the old device sends
// the peer goes out through its own relay while that is open, and then through the
// new device's relay, to the new stand-in; the new device's own stay with it.
func TestHandOverRelayed(t *testing.T) {
	name := fmt.Sprintf("weft-test-handover-relayed-%d", os.Getpid())
	log := zap.NewNop()
	peerKey := [32]byte{42}
	oldIn, newIn := netip.MustParseAddrPort("127.0.0.1:1001"), netip.MustParseAddrPort("127.0.0.1:2002")
	oldR := &tableRelay{standIns: map[netip.AddrPort][32]byte{oldIn: peerKey}}
	newR := &tableRelay{standIns: map[netip.AddrPort][32]byte{newIn: peerKey}}
	var wg sync.WaitGroup // the receiving goroutines, ended by the Binds' Close
	t.Cleanup(wg.Wait)

	old := New(log, nil)
	old.TakeRelayed(nil)
	old.SetRelay(oldR)
	oldFns, port, err := old.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { old.Close(); old.EndHandOver() })
	oldEP, _ := old.ParseEndpoint(oldIn.String())
	const oldIdx, newIdx = 0x5555, 0x6666
	if err := old.Send([][]byte{handshake(msgInitiation, oldIdx)}, oldEP); err != nil {
		t.Fatal(err)
	}
	oldR.await(t, 1)
	if _, err := old.HandOver(name); err != nil {
		t.Fatal(err)
	}
	nb := New(log, nil)
	nb.TakeRelayed(nil)
	nb.SetRelay(newR)
	if joined, err := nb.TakeOver(name); err != nil || !joined {
		t.Fatalf("TakeOver: %v, %v", joined, err)
	}
	newFns, _, err := nb.Open(port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nb.Close(); nb.EndHandOver() })
	newEP, _ := nb.ParseEndpoint(newIn.String())
	if err := nb.Send([][]byte{handshake(msgResponse, newIdx)}, newEP); err != nil {
		t.Fatal(err)
	}
	newR.await(t, 1)

	type got struct {
		p    []byte
		from string
	}
	receive := func(fn conn.ReceiveFunc, out chan<- got, wg *sync.WaitGroup) {
		wg.Go(func() {
			packets, sizes, eps := [][]byte{make([]byte, 2048)}, make([]int, 1), make([]conn.Endpoint, 1)
			for {
				n, err := fn(packets, sizes, eps)
				if err != nil {
					return
				}
				for i := range n {
					out <- got{append([]byte(nil), packets[i][:sizes[i]]...), eps[i].DstToString()}
				}
			}
		})
	}
	oldGot, newGot := make(chan got, 16), make(chan got, 16)
	receive(oldFns[len(oldFns)-1], oldGot, &wg) // the relayed datagrams' receive function
	receive(newFns[len(newFns)-1], newGot, &wg)
	next := func(ch <-chan got, who string) got {
		t.Helper()
		select {
		case g := <-ch:
			return g
		case <-time.After(5 * time.Second):
			t.Fatalf("the %s device got nothing", who)
			return got{}
		}
	}

	// The new relay brings one of each session's.
	if !nb.Deliver(transportMsg(oldIdx, 1), newIn) || !nb.Deliver(transportMsg(newIdx, 1), newIn) {
		t.Fatal("Deliver refused")
	}
	if g := next(oldGot, "old"); binary.LittleEndian.Uint32(g.p[4:]) != oldIdx || g.from != oldIn.String() {
		t.Fatalf("the old device got index %#x from %s, want %#x from its stand-in %v", binary.LittleEndian.Uint32(g.p[4:]), g.from, oldIdx, oldIn)
	}
	if g := next(newGot, "new"); binary.LittleEndian.Uint32(g.p[4:]) != newIdx || g.from != newIn.String() {
		t.Fatalf("the new device got index %#x from %s, want %#x from %v", binary.LittleEndian.Uint32(g.p[4:]), g.from, newIdx, newIn)
	}
	// The old device answers the peer through its own relay while that is open (the
	// new one may not have its relay yet), and through the new relay, to the new
	// stand-in, once its own is closed.
	reply := transportMsg(7, 2)
	if err := old.Send([][]byte{reply}, oldEP); err != nil {
		t.Fatal(err)
	}
	if s := oldR.await(t, 2)[1]; s.to != oldIn || string(s.p) != string(reply) {
		t.Fatalf("the old relay sent %x to %v, want the old device's %x to %v", s.p, s.to, reply, oldIn)
	}
	oldR.mu.Lock()
	oldR.closed = true
	oldR.mu.Unlock()
	reply = transportMsg(7, 3)
	if err := old.Send([][]byte{reply}, oldEP); err != nil {
		t.Fatal(err)
	}
	sent := newR.await(t, 2)
	if s := sent[1]; s.to != newIn || string(s.p) != string(reply) {
		t.Fatalf("the new relay sent %x to %v, want the old device's %x to %v", s.p, s.to, reply, newIn)
	}
	if n := len(oldR.await(t, 2)); n != 2 {
		t.Fatalf("the old relay, closed, sent %d datagrams, want the 2 from before", n)
	}
	// A stand-in the relay does not know stays with the device it came to.
	if !nb.Deliver(transportMsg(oldIdx, 3), netip.MustParseAddrPort("127.0.0.1:3003")) {
		t.Fatal("Deliver refused")
	}
	if g := next(newGot, "new"); g.from != "127.0.0.1:3003" {
		t.Fatalf("the new device got %x from %s", g.p, g.from)
	}
}
