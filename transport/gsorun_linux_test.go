package transport

import (
	"bytes"
	"net/netip"
	"testing"

	"go.uber.org/zap"
)

// TestStageRun: datagrams to one host of one size share a UDP GSO message, closed by
// a shorter one; a longer one, another host or the segment limit start a new
// message; and the kernel delivers every datagram on its own, intact.
func TestStageRun(t *testing.T) {
	rbufs := make([][]byte, 128)
	for i := range rbufs {
		rbufs[i] = make([]byte, 256)
	}
	rcv, err := Listen(Options{Addr: netip.MustParseAddr("127.0.0.2"), SocketBuffer: 1 << 20, Mmsg: true}, rbufs, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rcv.Close() })
	snd, err := Listen(Options{Addr: netip.MustParseAddr("127.0.0.1"), Mmsg: true, GSO: true, Messages: 8, Iovecs: 128}, rbufs[:1], zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = snd.Close() })
	if !snd.GSO() {
		t.Skip("kernel without UDP GSO")
	}
	lo2, other := rcv.LocalAddr(), netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), rcv.LocalAddr().Port())
	dg := func(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }
	type msg struct {
		ip  netip.AddrPort
		pkt []byte
	}
	var sent [][]byte
	in := []msg{{lo2, dg(100, 1)}, {lo2, dg(100, 2)}, {lo2, dg(100, 3)}, {lo2, dg(60, 4)}, // one run, closed by the short one
		{lo2, dg(100, 5)}, {lo2, dg(120, 6)}, // longer: a new message
		{other, dg(120, 7)}} // another host
	for range MaxSegments + 1 {
		in = append(in, msg{lo2, dg(50, byte(len(in)))}) // 64 in one message, then one more
	}
	for _, m := range in {
		if err := snd.StageRun(m.pkt, m.ip); err != nil {
			t.Fatal(err)
		}
		if m.ip == lo2 {
			sent = append(sent, m.pkt)
		}
	}
	wantSegs := []int{4, 1, 1, 1, MaxSegments, 1}
	if snd.tx.n != len(wantSegs) {
		t.Fatalf("%d messages staged (segments %v), want %d", snd.tx.n, snd.tx.segs[:snd.tx.n], len(wantSegs))
	}
	for i, w := range wantSegs {
		if snd.tx.segs[i] != w {
			t.Fatalf("message %d: %d datagrams, want %d (all %v)", i, snd.tx.segs[i], w, snd.tx.segs[:snd.tx.n])
		}
	}
	if failed, err := snd.Send(); failed > 1 || (failed == 1 && err == nil) {
		// The message to 127.0.0.3 may fail (nothing listens); the others may not.
		t.Fatalf("%d datagrams failed: %v", failed, err)
	}
	var got [][]byte
	for len(got) < len(sent) {
		n, err := rcv.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			got = append(got, append([]byte(nil), rbufs[i][:rcv.Size(i)]...))
		}
	}
	for i := range sent {
		if !bytes.Equal(got[i], sent[i]) {
			t.Fatalf("datagram %d: got %d bytes of %d, want %d of %d", i, len(got[i]), got[i][0], len(sent[i]), sent[i][0])
		}
	}
}
