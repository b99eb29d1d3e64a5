package wgbind

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"

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

func TestEndpointCache(t *testing.T) {
	var c endpoints
	a, b := netip.MustParseAddrPort("192.0.2.1:51820"), netip.MustParseAddrPort("192.0.2.2:51820")
	ea, eb := c.get(a), c.get(b)
	if ea == eb || c.get(a) != ea || c.get(b) != eb {
		t.Fatal("one Endpoint per source expected")
	}
	for i := range maxEndpoints + 1 {
		c.get(netip.AddrPortFrom(a.Addr(), uint16(i)))
	}
	if len(c.m) > maxEndpoints {
		t.Fatalf("cache grew to %d", len(c.m))
	}
}
