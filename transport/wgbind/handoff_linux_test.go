package wgbind

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
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
