package wgbind

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/conn"
)

// recordRelay plays the relay: it takes what is sent to its one stand-in address.
type recordRelay struct {
	standIn netip.AddrPort
	mu      sync.Mutex
	got     [][]byte
}

func (r *recordRelay) SendRelayed(bufs [][]byte, to netip.AddrPort) (bool, error) {
	if to != r.standIn {
		return false, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range bufs {
		r.got = append(r.got, bytes.Clone(b))
	}
	return true, nil
}

// TestRelayedLeg: with TakeRelayed, Open gives one more receive function, which
// returns what Deliver handed over, from the stand-in address, in order; Send to a
// stand-in goes to the Relay and not to the socket, any other address to the socket;
// a full queue drops and counts; Close ends the receive function.
func TestRelayedLeg(t *testing.T) {
	b := New(zap.NewNop(), nil)
	var dropped atomic.Uint64 // the caller's counter, as a device's drop reason
	b.TakeRelayed(&dropped)
	fns, _, err := b.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	recv := fns[len(fns)-1]
	standIn := netip.MustParseAddrPort("127.0.0.1:40999")
	for i := range 3 {
		if !b.Deliver([]byte{4, 0, 0, 0, byte(i)}, standIn) {
			t.Fatalf("datagram %d not taken", i)
		}
	}
	packets, sizes, eps := make([][]byte, 2), make([]int, 2), make([]conn.Endpoint, 2)
	for i := range packets {
		packets[i] = make([]byte, 2048)
	}
	var got []byte
	for len(got) < 3 {
		n, err := recv(packets, sizes, eps)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if sizes[i] != 5 || eps[i].(*Endpoint).AddrPort() != standIn {
				t.Fatalf("%d bytes from %v, want 5 from %v", sizes[i], eps[i].DstToString(), standIn)
			}
			got = append(got, packets[i][4])
		}
	}
	if !bytes.Equal(got, []byte{0, 1, 2}) {
		t.Fatalf("order %v, want 0 1 2", got)
	}

	// Send: the stand-in goes to the relay; with none set, or to another address,
	// to the socket.
	r := &recordRelay{standIn: standIn}
	b.SetRelay(r)
	ep, _ := b.ParseEndpoint(standIn.String())
	if err := b.Send([][]byte{{1, 2, 3}, {4, 5}}, ep); err != nil {
		t.Fatal(err)
	}
	if len(r.got) != 2 || !bytes.Equal(r.got[1], []byte{4, 5}) {
		t.Fatalf("the relay got %x, want both datagrams", r.got)
	}
	sink, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	other, _ := b.ParseEndpoint(sink.LocalAddr().String())
	if err := b.Send([][]byte{{7, 7}}, other); err != nil {
		t.Fatal(err)
	}
	if buf := make([]byte, 16); true {
		n, _, err := sink.ReadFromUDP(buf)
		if err != nil || !bytes.Equal(buf[:n], []byte{7, 7}) {
			t.Fatalf("the socket's datagram: %x, %v", buf[:n], err)
		}
	}
	if len(r.got) != 2 {
		t.Fatalf("the relay took a datagram for %v", sink.LocalAddr())
	}

	// A full queue drops, counted.
	for range relayedQueueLen {
		b.Deliver([]byte{4, 0, 0, 0}, standIn)
	}
	if b.Deliver([]byte{4, 0, 0, 0}, standIn) || b.RelayDrops() != 1 || dropped.Load() != 1 {
		t.Fatalf("over a full queue: drops %d (the caller's counter %d), want 1", b.RelayDrops(), dropped.Load())
	}
	// Close ends the receive function.
	_ = b.Close()
	for {
		if _, err := recv(packets, sizes, eps); err != nil {
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("after Close: %v, want net.ErrClosed", err)
			}
			break
		}
	}
}
