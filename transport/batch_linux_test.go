package transport

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// pair opens a receiver with n buffers of size bytes on addr and a sender on the
// same family with room for msgs messages.
func pair(t *testing.T, addr string, rcvOpts, sndOpts Options, n, size int) (snd, rcv *Conn, rbufs [][]byte) {
	t.Helper()
	rbufs = make([][]byte, n)
	for i := range rbufs {
		rbufs[i] = make([]byte, size)
	}
	rcvOpts.Addr = netip.MustParseAddr(addr)
	rcvOpts.IPv6 = rcvOpts.Addr.Is6()
	rcv, err := Listen(rcvOpts, rbufs, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rcv.Close() })
	sndOpts.Addr, sndOpts.IPv6 = rcvOpts.Addr, rcvOpts.IPv6
	snd, err = Listen(sndOpts, [][]byte{make([]byte, 64)}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = snd.Close() })
	return snd, rcv, rbufs
}

// receive reads until want datagrams came, splitting GRO messages.
func receive(t *testing.T, rcv *Conn, rbufs [][]byte, want int) (dgrams [][]byte, msgs int) {
	t.Helper()
	for len(dgrams) < want {
		n, err := rcv.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			msgs++
			size, step := rcv.Size(i), rcv.SegSize(i)
			if size > len(rbufs[i]) {
				t.Fatalf("message %d: %d bytes, buffer %d", i, size, len(rbufs[i]))
			}
			if step == 0 {
				step = size
			}
			for off := 0; off < size; off += step {
				dgrams = append(dgrams, append([]byte(nil), rbufs[i][off:min(off+step, size)]...))
			}
		}
	}
	return dgrams, msgs
}

func dgram(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }

// TestBatches: a batch larger than the receiver's buffers arrives whole, in order,
// over several Recv calls, from the sender's address; on IPv4 and IPv6, with and
// without sendmmsg/recvmmsg.
func TestBatches(t *testing.T) {
	for _, c := range []struct {
		name, addr string
		mmsg       bool
	}{
		{"v4/mmsg", "127.0.0.1", true},
		{"v4/each", "127.0.0.1", false},
		{"v6/mmsg", "::1", true},
		{"v6/each", "::1", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			snd, rcv, rbufs := pair(t, c.addr, Options{Mmsg: c.mmsg, SocketBuffer: 1 << 20},
				Options{Mmsg: c.mmsg, Messages: 100, Iovecs: 100}, 32, 2048)
			var sent [][]byte
			for i := range 100 {
				p := dgram(100+i, byte(i))
				if err := snd.Stage(p, rcv.LocalAddr()); err != nil {
					t.Fatal(err)
				}
				sent = append(sent, p)
			}
			if snd.Staged() != 100 {
				t.Fatalf("%d staged, want 100", snd.Staged())
			}
			if failed, err := snd.Send(); failed != 0 || err != nil {
				t.Fatalf("send: %d failed: %v", failed, err)
			}
			if snd.Staged() != 0 {
				t.Fatalf("%d still staged after Send", snd.Staged())
			}
			got, _ := receive(t, rcv, rbufs, len(sent))
			for i := range sent {
				if !bytes.Equal(got[i], sent[i]) {
					t.Fatalf("datagram %d: %d bytes of %d, want %d of %d", i, len(got[i]), got[i][0], len(sent[i]), sent[i][0])
				}
			}
			if from := rcv.From(0); from != snd.LocalAddr() {
				t.Fatalf("from %v, want %v", from, snd.LocalAddr())
			}
		})
	}
}

// TestFamily: a destination of the other family stages nothing and says so;
// IPv4-mapped IPv6 is IPv4.
func TestFamily(t *testing.T) {
	snd4, rcv4, _ := pair(t, "127.0.0.1", Options{}, Options{Messages: 2, Iovecs: 2}, 1, 64)
	snd6, _, _ := pair(t, "::1", Options{}, Options{Messages: 2, Iovecs: 2}, 1, 64)
	v6 := netip.MustParseAddrPort("[::1]:9")
	if err := snd4.Stage([]byte{1}, v6); !errors.Is(err, ErrFamily) {
		t.Fatalf("IPv6 destination on an IPv4 socket: %v, want ErrFamily", err)
	}
	if err := snd6.Stage([]byte{1}, rcv4.LocalAddr()); !errors.Is(err, ErrFamily) {
		t.Fatalf("IPv4 destination on an IPv6 socket: %v, want ErrFamily", err)
	}
	if snd4.Staged()+snd6.Staged() != 0 {
		t.Fatal("a refused destination was staged")
	}
	mapped := netip.AddrPortFrom(netip.AddrFrom16(rcv4.LocalAddr().Addr().As16()), rcv4.LocalAddr().Port())
	if err := snd4.Stage([]byte{1}, mapped); err != nil {
		t.Fatalf("IPv4-mapped destination: %v", err)
	}
}

// TestTruncated: a datagram larger than the receive buffer is cut, and Size says
// how large it was, so that the caller counts it instead of taking a piece.
func TestTruncated(t *testing.T) {
	for _, mmsg := range []bool{true, false} {
		snd, rcv, rbufs := pair(t, "127.0.0.1", Options{Mmsg: mmsg}, Options{Mmsg: mmsg, Messages: 2, Iovecs: 2}, 2, 64)
		_ = snd.Stage(dgram(200, 7), rcv.LocalAddr())
		if failed, err := snd.Send(); failed != 0 || err != nil {
			t.Fatalf("send: %d failed: %v", failed, err)
		}
		n, err := rcv.Recv()
		if err != nil || n != 1 {
			t.Fatalf("recv: %d, %v", n, err)
		}
		if rcv.Size(0) != 200 || len(rbufs[0]) != 64 {
			t.Fatalf("mmsg %v: size %d, want the datagram's 200 beyond the 64-byte buffer", mmsg, rcv.Size(0))
		}
	}
}

// TestNothingQueued: TryRecv returns at once with nothing and no error.
func TestNothingQueued(t *testing.T) {
	_, rcv, _ := pair(t, "127.0.0.1", Options{Mmsg: true}, Options{}, 4, 64)
	if n, err := rcv.TryRecv(); n != 0 || err != nil {
		t.Fatalf("TryRecv on an empty socket: %d, %v", n, err)
	}
}

// TestFailedMessage: a message the kernel refuses (EMSGSIZE here; ENOBUFS and the
// others take the same way) is counted and named, and the messages after it are
// still sent: sendmmsg stops at the first failure, Send goes on past it.
func TestFailedMessage(t *testing.T) {
	for _, mmsg := range []bool{true, false} {
		snd, rcv, rbufs := pair(t, "127.0.0.1", Options{Mmsg: mmsg}, Options{Mmsg: mmsg, Messages: 3, Iovecs: 4}, 4, 256)
		to := rcv.LocalAddr()
		_ = snd.Stage(dgram(100, 1), to)
		_ = snd.Begin(to) // one datagram larger than UDP allows, from two pieces
		snd.AddIov(make([]byte, 40000))
		snd.AddIov(make([]byte, 40000))
		snd.End(1, 0)
		_ = snd.Stage(dgram(100, 3), to)
		failed, err := snd.Send()
		if failed != 1 || !errors.Is(err, unix.EMSGSIZE) {
			t.Fatalf("mmsg %v: %d failed, %v; want 1, EMSGSIZE", mmsg, failed, err)
		}
		got, _ := receive(t, rcv, rbufs, 2)
		if got[0][0] != 1 || got[1][0] != 3 {
			t.Fatalf("mmsg %v: received %d then %d, want 1 then 3", mmsg, got[0][0], got[1][0])
		}
	}
}

// TestFullSendBuffer: with a send buffer far smaller than a batch, Send waits for
// room (EAGAIN) instead of dropping: every datagram is sent.
func TestFullSendBuffer(t *testing.T) {
	const n = 256
	snd, rcv, rbufs := pair(t, "127.0.0.1", Options{Mmsg: true, SocketBuffer: 8 << 20},
		Options{Mmsg: true, SocketBuffer: 4096, Messages: n, Iovecs: n}, 64, 2048)
	p := dgram(1400, 9)
	for range n {
		_ = snd.Stage(p, rcv.LocalAddr())
	}
	done := make(chan struct{})
	var got [][]byte
	go func() {
		defer close(done)
		got, _ = receive(t, rcv, rbufs, n)
	}()
	if failed, err := snd.Send(); failed != 0 || err != nil {
		t.Fatalf("send: %d failed: %v", failed, err)
	}
	<-done
	if len(got) != n {
		t.Fatalf("received %d datagrams, want %d", len(got), n)
	}
}

// TestGROBoundaries: with GSO on the sender and GRO on the receiver, a run crosses
// the stack as one message of SegSize datagrams; the run ends at a shorter datagram,
// at MaxSegments, at another destination, and at a larger datagram; every datagram
// arrives intact.
func TestGROBoundaries(t *testing.T) {
	for _, addr := range []string{"127.0.0.1", "::1"} {
		t.Run(addr, func(t *testing.T) {
			snd, rcv, rbufs := pair(t, addr, Options{Mmsg: true, GRO: true, SocketBuffer: 4 << 20},
				Options{Mmsg: true, GSO: true, Messages: 16, Iovecs: 256}, 16, 1<<16)
			if !snd.GSO() || !rcv.GRO() {
				t.Skip("kernel without UDP GSO/GRO")
			}
			to := rcv.LocalAddr()
			var sent [][]byte
			stage := func(size int) {
				p := dgram(size, byte(len(sent)))
				if err := snd.StageRun(p, to); err != nil {
					t.Fatal(err)
				}
				sent = append(sent, p)
			}
			for range 10 {
				stage(500)
			}
			stage(100) // ends the run of 11
			for range MaxSegments + 2 {
				stage(300) // 64, then a run of 2
			}
			stage(400) // larger: a message of its own
			if snd.Staged() != 4 {
				t.Fatalf("%d messages staged, want 4", snd.Staged())
			}
			if failed, err := snd.Send(); failed != 0 || err != nil {
				t.Fatalf("send: %d failed: %v", failed, err)
			}
			got, msgs := receive(t, rcv, rbufs, len(sent))
			for i := range sent {
				if !bytes.Equal(got[i], sent[i]) {
					t.Fatalf("datagram %d: %d bytes, want %d", i, len(got[i]), len(sent[i]))
				}
			}
			if msgs > 4 || msgs < 1 {
				t.Fatalf("%d messages received for 4 runs", msgs)
			}
		})
	}
}

// TestDualStack: one socket for both families takes IPv4 and IPv6 destinations,
// and reports IPv4 sources as plain IPv4.
func TestDualStack(t *testing.T) {
	rbufs := [][]byte{make([]byte, 64), make([]byte, 64)}
	d, err := Listen(Options{DualStack: true, Mmsg: true, Messages: 2, Iovecs: 2}, rbufs, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	port := d.LocalAddr().Port()
	for _, c := range []struct{ local, peer string }{{"127.0.0.1", "127.0.0.1"}, {"::1", "::1"}} {
		p, prb := netip.MustParseAddr(c.peer), [][]byte{make([]byte, 64)}
		peer, err := Listen(Options{Addr: p, IPv6: p.Is6(), Messages: 1, Iovecs: 1}, prb, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = peer.Close() })
		if err := peer.Stage([]byte{7}, netip.AddrPortFrom(netip.MustParseAddr(c.local), port)); err != nil {
			t.Fatal(err)
		}
		if _, err := peer.Send(); err != nil {
			t.Fatal(err)
		}
		if n, err := d.Recv(); err != nil || n != 1 {
			t.Fatalf("recv: %d, %v", n, err)
		}
		if from := d.From(0); from != peer.LocalAddr() {
			t.Fatalf("from %v, want %v", from, peer.LocalAddr())
		}
		if err := d.Stage([]byte{8}, peer.LocalAddr()); err != nil {
			t.Fatalf("answer to %v: %v", peer.LocalAddr(), err)
		}
		if failed, err := d.Send(); failed != 0 || err != nil {
			t.Fatalf("answer: %d failed, %v", failed, err)
		}
		if n, err := peer.Recv(); err != nil || n != 1 || prb[0][0] != 8 {
			t.Fatalf("answer received: %d, %v", n, err)
		}
	}
}
