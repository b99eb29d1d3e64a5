package transport

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// TestLocalAddrs: a socket on every address learns which one each datagram came to,
// and a reply that names it as its source leaves from it, where the route would
// pick another (on IPv4: a datagram to 127.0.0.2 answered to 127.0.0.1 leaves from
// 127.0.0.1 unless the reply names 127.0.0.2). A GSO run keeps its source, with and
// without recvmmsg/sendmmsg.
func TestLocalAddrs(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name        string
		v6, mmsg    bool
		peer, local string // the peer's address; the address it sends to
		routeSrc    string // where a reply without a source leaves from
	}{
		{"v4/mmsg", false, true, "127.0.0.1", "127.0.0.2", "127.0.0.1"},
		{"v4/each", false, false, "127.0.0.1", "127.0.0.2", "127.0.0.1"},
		{"v6/mmsg", true, true, "::1", "::1", "::1"},
		{"v6/each", true, false, "::1", "::1", "::1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			port := freeUDPPort(t)
			if c.v6 {
				port = freeUDPPort6(t)
			}
			rbufs := [][]byte{make([]byte, 1<<16), make([]byte, 1<<16)}
			srv, err := Listen(Options{Port: port, IPv6: c.v6, LocalAddrs: true, GRO: true, GSO: true, Mmsg: c.mmsg,
				Messages: 4, Iovecs: 8}, rbufs, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			pbufs := [][]byte{make([]byte, 1<<16), make([]byte, 1<<16), make([]byte, 1<<16), make([]byte, 1<<16)}
			peer, err := Listen(Options{Addr: netip.MustParseAddr(c.peer), IPv6: c.v6, GRO: true, Mmsg: c.mmsg,
				Messages: 2, Iovecs: 2}, pbufs, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			defer peer.Close()

			to := netip.AddrPortFrom(netip.MustParseAddr(c.local), uint16(port))
			if err := peer.Stage(dgram(100, 1), to); err != nil {
				t.Fatal(err)
			}
			if failed, err := peer.Send(); failed != 0 || err != nil {
				t.Fatalf("send: %d failed: %v", failed, err)
			}
			n, err := srv.Recv()
			if err != nil || n != 1 {
				t.Fatalf("receive: %d messages: %v", n, err)
			}
			got := srv.Local(0)
			if want := (Local{Addr: netip.MustParseAddr(c.local), Ifindex: lo.Index}); got != want {
				t.Fatalf("Local = %+v, want %+v", got, want)
			}
			if srv.SegSize(0) != 0 || srv.Size(0) != 100 {
				t.Fatalf("message of %d bytes, segments of %d: want one datagram of 100", srv.Size(0), srv.SegSize(0))
			}
			from := srv.From(0)

			// Three datagrams as one run from the address the peer sent to, then one
			// the route places.
			for range 3 {
				if err := srv.StageRunFrom(dgram(200, 2), from, got); err != nil {
					t.Fatal(err)
				}
			}
			if err := srv.Stage(dgram(50, 3), from); err != nil {
				t.Fatal(err)
			}
			if failed, err := srv.Send(); failed != 0 || err != nil {
				t.Fatalf("reply: %d failed: %v", failed, err)
			}
			sources := map[byte][]netip.Addr{}
			for count := 0; count < 4; {
				n, err := peer.Recv()
				if err != nil {
					t.Fatal(err)
				}
				for i := range n {
					size, step := peer.Size(i), peer.SegSize(i)
					if step == 0 {
						step = size
					}
					for off := 0; off < size; off += step {
						b := pbufs[i][off]
						sources[b] = append(sources[b], peer.From(i).Addr())
						count++
					}
				}
			}
			for _, s := range sources[2] {
				if s.String() != c.local {
					t.Errorf("reply naming its source came from %v, want %s", s, c.local)
				}
			}
			if len(sources[2]) != 3 || len(sources[3]) != 1 || sources[3][0].String() != c.routeSrc {
				t.Errorf("replies by source %v: want 3 from %s and 1 (no source named) from %s", sources, c.local, c.routeSrc)
			}
		})
	}
}

// TestLocalRefused: a source that is not the host's fails that message (the kernel
// finds no route from it) and not the others; a source of the other family is refused before staging; a
// dual-stack socket cannot report local addresses.
func TestLocalRefused(t *testing.T) {
	snd, rcv, rbufs := pair(t, "127.0.0.1", Options{}, Options{Messages: 4, Iovecs: 4}, 4, 64)
	if err := snd.StageFrom(dgram(10, 1), rcv.LocalAddr(), Local{Addr: netip.MustParseAddr("192.0.2.99")}); err != nil {
		t.Fatal(err)
	}
	if err := snd.Stage(dgram(10, 2), rcv.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	failed, err := snd.Send()
	var errno unix.Errno
	if failed != 1 || !errors.As(err, &errno) {
		t.Fatalf("send from a foreign source: %d failed: %v; want 1, the kernel's error", failed, err)
	}
	got, _ := receive(t, rcv, rbufs, 1)
	if got[0][0] != 2 {
		t.Fatalf("received %v, want the datagram without a source", got[0])
	}
	if err := snd.BeginFrom(rcv.LocalAddr(), Local{Addr: netip.MustParseAddr("::1")}); !errors.Is(err, ErrFamily) {
		t.Fatalf("IPv6 source on an IPv4 socket: %v, want ErrFamily", err)
	}
	if snd.Staged() != 0 {
		t.Fatal("a refused source was staged")
	}
	if _, err := Listen(Options{DualStack: true, LocalAddrs: true}, [][]byte{make([]byte, 64)}, zap.NewNop()); !errors.Is(err, ErrOption) {
		t.Fatalf("LocalAddrs with DualStack: %v, want ErrOption", err)
	}
}

func freeUDPPort6(t *testing.T) int {
	t.Helper()
	c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}
