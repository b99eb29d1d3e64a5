package wgbind

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/weftnet/weft/transport"
	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/conn"
)

func open(t *testing.T) (*Bind, []conn.ReceiveFunc, uint16) {
	t.Helper()
	b := New(zap.NewNop(), nil)
	fns, port, err := b.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if port == 0 || len(fns) == 0 {
		t.Fatalf("port %d, %d receive functions", port, len(fns))
	}
	return b, fns, port
}

// TestSendReceive: a batch wireguard-go hands over (runs of one size, a shorter one
// ending a run, two sizes) arrives whole and in order through receive calls that
// take fewer datagrams than a GRO message holds; the source is the sender's port,
// one Endpoint for all of them.
func TestSendReceive(t *testing.T) {
	for _, c := range []struct {
		name string
		to   string
		fn   int // the receive function of the family
	}{{"v4", "127.0.0.1", 0}, {"v6", "::1", 1}} {
		t.Run(c.name, func(t *testing.T) {
			a, _, portA := open(t)
			_, fnsB, portB := open(t)
			if c.fn >= len(fnsB) {
				t.Skip("no IPv6 on this host")
			}
			ep, err := a.ParseEndpoint(netip.AddrPortFrom(netip.MustParseAddr(c.to), portB).String())
			if err != nil {
				t.Fatal(err)
			}
			var sent [][]byte
			for i := range 150 {
				size := 1200
				if i%50 == 49 {
					size = 300
				}
				sent = append(sent, bytes.Repeat([]byte{byte(i)}, size))
			}
			if err := a.Send(sent, ep); err != nil {
				t.Fatal(err)
			}
			packets, sizes, eps := make([][]byte, 7), make([]int, 7), make([]conn.Endpoint, 7)
			for i := range packets {
				packets[i] = make([]byte, 2048)
			}
			var got [][]byte
			var from conn.Endpoint
			for len(got) < len(sent) {
				n, err := fnsB[c.fn](packets, sizes, eps)
				if err != nil {
					t.Fatal(err)
				}
				for i := range n {
					got = append(got, append([]byte(nil), packets[i][:sizes[i]]...))
					if from == nil {
						from = eps[i]
					} else if eps[i] != from {
						t.Fatalf("datagram %d: endpoint %v, a new one for the same source %v", len(got), eps[i].DstToString(), from.DstToString())
					}
				}
			}
			for i := range sent {
				if !bytes.Equal(got[i], sent[i]) {
					t.Fatalf("datagram %d: %d bytes of %d, want %d of %d", i, len(got[i]), got[i][0], len(sent[i]), sent[i][0])
				}
			}
			if p := from.(*Endpoint).AddrPort().Port(); p != portA {
				t.Fatalf("source port %d, want %d", p, portA)
			}
		})
	}
}

// TestClose: Close ends a waiting receive with net.ErrClosed (wireguard-go's
// receive goroutines stop on it), and the Bind opens again.
func TestClose(t *testing.T) {
	b := New(zap.NewNop(), nil)
	fns, _, err := b.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := fns[0](make([][]byte, 1), make([]int, 1), make([]conn.Endpoint, 1))
		done <- err
	}()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("receive after Close: %v, want net.ErrClosed", err)
	}
	if _, _, err := b.Open(0); err != nil {
		t.Fatalf("open again: %v", err)
	}
	_ = b.Close()
}

// TestForeignEndpoint: an endpoint of another Bind is refused, not sent to.
func TestForeignEndpoint(t *testing.T) {
	b, _, _ := open(t)
	ep, err := conn.NewStdNetBind().ParseEndpoint("127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Send([][]byte{{1}}, ep); err == nil {
		t.Fatal("sent to a foreign endpoint")
	}
}

// TestEndpointCache: one Endpoint per source and local address; a cleared one is
// replaced, not handed out again; the cache stays bounded.
func TestEndpointCache(t *testing.T) {
	var c endpoints
	a, b := netip.MustParseAddrPort("192.0.2.1:51820"), netip.MustParseAddrPort("192.0.2.2:51820")
	l1, l2 := transport.Local{Addr: netip.MustParseAddr("192.0.2.10"), Ifindex: 2}, transport.Local{Addr: netip.MustParseAddr("192.0.2.11"), Ifindex: 2}
	ea, eb := c.get(a, l1), c.get(b, l1)
	if ea == eb || c.get(a, l1) != ea || c.get(b, l1) != eb {
		t.Fatal("one Endpoint per source expected")
	}
	ea2 := c.get(a, l2)
	if ea2 == ea || ea2.SrcIP() != l2.Addr || c.get(a, l1) != ea {
		t.Fatal("one Endpoint per local address expected")
	}
	ea.ClearSrc()
	if ea.SrcIP().IsValid() || ea.SrcToString() != "" {
		t.Fatalf("cleared endpoint keeps source %v", ea.SrcIP())
	}
	if fresh := c.get(a, l1); fresh == ea || fresh.SrcIP() != l1.Addr {
		t.Fatal("a cleared Endpoint was handed out again")
	}
	for i := range maxEndpoints + 1 {
		c.get(netip.AddrPortFrom(a.Addr(), uint16(i)), l1)
	}
	if len(c.m) > maxEndpoints {
		t.Fatalf("cache grew to %d", len(c.m))
	}
}

// recvOne receives one datagram with fn and returns its endpoint.
func recvOne(t *testing.T, fn conn.ReceiveFunc) *Endpoint {
	t.Helper()
	packets, sizes, eps := [][]byte{make([]byte, 2048)}, make([]int, 1), make([]conn.Endpoint, 1)
	n, err := fn(packets, sizes, eps)
	if err != nil || n != 1 {
		t.Fatalf("receive: %d datagrams: %v", n, err)
	}
	return eps[0].(*Endpoint)
}

// TestStickySource: a reply leaves from the address the peer sent to (127.0.0.2),
// where the route would pick 127.0.0.1, as wireguard-go's own Bind and the kernel's
// device answer; after ClearSrc the route picks it; a source that is no longer the
// host's is dropped and the datagram goes from the route's.
func TestStickySource(t *testing.T) {
	a, fnsA, portA := open(t)
	b, fnsB, portB := open(t)
	toB, err := a.ParseEndpoint(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), portB).String())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Send([][]byte{{1}}, toB); err != nil {
		t.Fatal(err)
	}
	epA := recvOne(t, fnsB[0])
	if got := epA.SrcIP(); got != netip.MustParseAddr("127.0.0.2") {
		t.Fatalf("B sees it came to %v, want 127.0.0.2", got)
	}
	if err := b.Send([][]byte{{2}, {2}}, epA); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got := recvOne(t, fnsA[0]).AddrPort(); got != netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), portB) {
			t.Fatalf("reply from %v, want 127.0.0.2:%d", got, portB)
		}
	}

	epA.ClearSrc()
	if err := b.Send([][]byte{{3}}, epA); err != nil {
		t.Fatal(err)
	}
	if got := recvOne(t, fnsA[0]).AddrPort(); got != netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), portB) {
		t.Fatalf("after ClearSrc, reply from %v, want 127.0.0.1:%d (the route's)", got, portB)
	}

	gone := &Endpoint{ap: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), portA),
		src: transport.Local{Addr: netip.MustParseAddr("192.0.2.99")}}
	if err := b.Send([][]byte{{4}}, gone); err != nil {
		t.Fatalf("send from a source the host lost: %v, want it sent from the route's", err)
	}
	if got := recvOne(t, fnsA[0]).AddrPort(); got != netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), portB) {
		t.Fatalf("reply from %v, want 127.0.0.1:%d", got, portB)
	}
	if gone.SrcIP().IsValid() {
		t.Fatal("the lost source is still kept")
	}
}
