package wgbind

import (
	"net/netip"
	"strconv"
	"testing"

	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/conn"
)

// BenchmarkBind moves one batch of WireGuard-sized datagrams (1,452 B: a 1,420 B
// inner packet sealed) over loopback per op, sent by Send and taken by the receive
// function as wireguard-go calls them, through this package's Bind and through
// wireguard-go's own (conn.StdNetBind), in one run: the ratio is what counts.
func BenchmarkBind(b *testing.B) {
	for _, n := range []int{16, 128} {
		b.Run("weft/batch"+strconv.Itoa(n), func(b *testing.B) { benchBind(b, New(zap.NewNop(), nil), New(zap.NewNop(), nil), n) })
		b.Run("wireguard-go/batch"+strconv.Itoa(n), func(b *testing.B) { benchBind(b, conn.NewStdNetBind(), conn.NewStdNetBind(), n) })
	}
}

func benchBind(b *testing.B, snd, rcv conn.Bind, n int) {
	if _, _, err := snd.Open(0); err != nil {
		b.Fatal(err)
	}
	defer snd.Close()
	fns, port, err := rcv.Open(0)
	if err != nil {
		b.Fatal(err)
	}
	defer rcv.Close()
	ep, err := snd.ParseEndpoint(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port).String())
	if err != nil {
		b.Fatal(err)
	}
	const size = 1452
	bufs := make([][]byte, n)
	for i := range bufs {
		// wireguard-go's buffers are a whole message long; its Bind appends into them.
		bufs[i] = make([]byte, size, 1<<16)
	}
	packets, sizes, eps := make([][]byte, rcv.BatchSize()), make([]int, rcv.BatchSize()), make([]conn.Endpoint, rcv.BatchSize())
	for i := range packets {
		packets[i] = make([]byte, 1<<16)
	}
	b.SetBytes(int64(n * size))
	b.ReportAllocs()
	for range b.N {
		for i := range bufs {
			bufs[i] = bufs[i][:size]
		}
		if err := snd.Send(bufs, ep); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < n; {
			k, err := fns[0](packets, sizes, eps)
			if err != nil {
				b.Fatal(err)
			}
			got += k
		}
	}
}
