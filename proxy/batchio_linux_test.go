package proxy

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/net/ipv4"
)

// BenchmarkBatchIO compares the data path's own sendmmsg/recvmmsg (udpConn) with
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
func batchPair(b *testing.B, batch, size int) (snd, rcv *udpConn) {
	rbufs := make([][]byte, batch)
	for i := range rbufs {
		rbufs[i] = make([]byte, size+64)
	}
	lo2 := netip.MustParseAddr("127.0.0.2")
	rcv, err := listenUDP(sockOpts{addr: lo2, bufBytes: 4 << 20, mmsg: true}, batch, batch, rbufs, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rcv.close() })
	port := rcv.c.LocalAddr().(*net.UDPAddr).Port
	snd, err = listenUDP(sockOpts{addr: netip.MustParseAddr("127.0.0.1"), port: port, bufBytes: 4 << 20, mmsg: true},
		batch, batch, [][]byte{make([]byte, 64)}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = snd.close() })
	return snd, rcv
}

func benchRawBatch(b *testing.B, size, batch int) {
	snd, rcv := batchPair(b, batch, size)
	pkt := make([]byte, size)
	dst := uint32(127)<<24 | 2
	b.SetBytes(int64(size * batch))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for range batch {
			snd.stage(pkt, dst)
		}
		if failed, err := snd.send(); failed > 0 || err != nil {
			b.Fatalf("send: %d failed: %v", failed, err)
		}
		for got := 0; got < batch; {
			n, err := rcv.recv()
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if rcv.size(i) != size {
					b.Fatalf("datagram of %d bytes, want %d", rcv.size(i), size)
				}
			}
			got += n
		}
	}
}

func benchXNetBatch(b *testing.B, size, batch int) {
	s, r := batchPair(b, batch, size)
	snd, rcv := ipv4.NewPacketConn(s.c), ipv4.NewPacketConn(r.c)
	dst := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: int(r.port)}
	dst.Port = r.c.LocalAddr().(*net.UDPAddr).Port
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
