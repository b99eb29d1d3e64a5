package transport

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/net/ipv4"
)

// BenchmarkBatchIO compares the data path's own sendmmsg/recvmmsg (Conn) with
// golang.org/x/net/ipv4's PacketConn.WriteBatch/ReadBatch, which the design notes
// name, on a real UDP socket pair over loopback: each op sends one batch of
// datagrams from 127.0.0.1 to 127.0.0.2 and receives all of it. Both sides run with
// the same batch, sizes and socket buffers; only the batch calls differ.
func BenchmarkBatchIO(b *testing.B) {
	for _, size := range []int{64, 1400} {
		for _, batch := range []int{8, 32} {
			b.Run(fmt.Sprintf("raw/%dB/batch%d", size, batch), func(b *testing.B) { benchRawBatch(b, size, batch) })
			b.Run(fmt.Sprintf("xnet/%dB/batch%d", size, batch), func(b *testing.B) { benchXNetBatch(b, size, batch) })
		}
	}
}

// batchPair opens the receiving socket on 127.0.0.2 at a free port and the sending
// one on 127.0.0.1 at the same port (the udp backend sends to its own port).
func batchPair(b *testing.B, batch, size int) (snd, rcv *Conn) {
	rbufs := make([][]byte, batch)
	for i := range rbufs {
		rbufs[i] = make([]byte, size+64)
	}
	lo2 := netip.MustParseAddr("127.0.0.2")
	rcv, err := Listen(Options{Addr: lo2, SocketBuffer: 4 << 20, Mmsg: true, Messages: batch, Iovecs: batch}, rbufs, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rcv.Close() })
	port := int(rcv.LocalAddr().Port())
	snd, err = Listen(Options{Addr: netip.MustParseAddr("127.0.0.1"), Port: port, SocketBuffer: 4 << 20, Mmsg: true, Messages: batch, Iovecs: batch},
		[][]byte{make([]byte, 64)}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = snd.Close() })
	return snd, rcv
}

func benchRawBatch(b *testing.B, size, batch int) {
	snd, rcv := batchPair(b, batch, size)
	pkt := make([]byte, size)
	dst := rcv.LocalAddr()
	b.SetBytes(int64(size * batch))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for range batch {
			_ = snd.Stage(pkt, dst)
		}
		if failed, err := snd.Send(); failed > 0 || err != nil {
			b.Fatalf("send: %d failed: %v", failed, err)
		}
		for got := 0; got < batch; {
			n, err := rcv.Recv()
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if rcv.Size(i) != size {
					b.Fatalf("datagram of %d bytes, want %d", rcv.Size(i), size)
				}
			}
			got += n
		}
	}
}

func benchXNetBatch(b *testing.B, size, batch int) {
	s, r := batchPair(b, batch, size)
	snd, rcv := ipv4.NewPacketConn(s.c), ipv4.NewPacketConn(r.c)
	dst := net.UDPAddrFromAddrPort(r.LocalAddr())
	pkt := make([]byte, size)
	wm, rm := make([]ipv4.Message, batch), make([]ipv4.Message, batch)
	for i := range wm {
		wm[i].Buffers, wm[i].Addr = [][]byte{pkt}, dst
		rm[i].Buffers = [][]byte{make([]byte, size+64)}
	}
	b.SetBytes(int64(size * batch))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for sent := 0; sent < batch; {
			n, err := snd.WriteBatch(wm[sent:], 0)
			if err != nil {
				b.Fatal(err)
			}
			sent += n
		}
		for got := 0; got < batch; {
			n, err := rcv.ReadBatch(rm[:batch-got], 0)
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if rm[i].N != size {
					b.Fatalf("datagram of %d bytes, want %d", rm[i].N, size)
				}
			}
			got += n
		}
	}
}
