package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/bench/testenv"
)

// TestUDPOffloadPath sends UDP between the lab's pods through real TUN queues: a
// burst of datagrams that one sendmsg hands over with UDP_SEGMENT (a UDP super packet
// on a's TUN with USO, cut into datagrams by a's worker, coalesced again by b's and
// cut apart by b's kernel) and a burst of single datagrams. Every datagram must
// arrive whole, in its own recvmsg, with its own payload.
func TestUDPOffloadPath(t *testing.T) {
	testenv.NeedRoot(t)
	for _, o := range []struct {
		name string
		labOpts
	}{
		{"offload with USO", labOpts{queues: 1, offload: true}},
		{"offload without USO", labOpts{queues: 1, offload: true, noUSO: true}},
		{"plain", labOpts{queues: 1}},
	} {
		t.Run(o.name, func(t *testing.T) { testUDPOffloadPath(t, o.labOpts) })
	}
}

func testUDPOffloadPath(t *testing.T, o labOpts) {
	l := newLab(t, o)
	a, b := l.hosts[0], l.hosts[1]
	if o.offload && !o.noUSO && !b.px.workers[0].uso {
		t.Logf("kernel without TUN USO: the UDP super packet path is not exercised")
	}
	var rc, sc *net.UDPConn
	if err := b.ns.Do(func() (err error) {
		rc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: labPod[1].AsSlice()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	if err := rc.SetReadBuffer(4 << 20); err != nil {
		t.Fatal(err)
	}
	if err := a.ns.Do(func() (err error) {
		sc, err = net.DialUDP("udp4", &net.UDPAddr{IP: labPod[0].AsSlice()}, rc.LocalAddr().(*net.UDPAddr))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })

	const segSize, segs = 100, 40
	payload := make([]byte, segSize*segs-30) // the last datagram is short
	for i := range payload {
		payload[i] = byte(i/segSize) ^ byte(i)
	}
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], segSize)
	if _, _, err := sc.WriteMsgUDP(payload, oob, nil); err != nil {
		t.Fatalf("send with UDP_SEGMENT: %v", err)
	}
	for i := range segs {
		want := payload[i*segSize : min((i+1)*segSize, len(payload))]
		if err := readDatagram(rc, want); err != nil {
			t.Fatalf("segmented datagram %d: %v", i, err)
		}
	}
	const singles = 100
	for i := range singles {
		if _, err := sc.Write([]byte(fmt.Sprintf("datagram %04d of a burst", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range singles {
		if err := readDatagram(rc, []byte(fmt.Sprintf("datagram %04d of a burst", i))); err != nil {
			t.Fatalf("single datagram %d: %v", i, err)
		}
	}
	// b's worker counts a batch after its TUN write returns, so the last batch can be
	// read by the socket before it is counted: await the count (CI once read 104 of
	// 140 here).
	var sb Stats
	deadline := time.Now().Add(5 * time.Second)
	for sb = b.px.Stats(); sb.RxPackets < segs+singles && time.Now().Before(deadline); sb = b.px.Stats() {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("b: %d packets in %d TUN writes", sb.RxPackets, sb.RxWrites)
	if sb.RxPackets < segs+singles {
		t.Fatalf("b counted %d packets within 5 s, want at least %d", sb.RxPackets, segs+singles)
	}
	// The segmented burst reaches b in one message (UDP GSO, UDP GRO): with USO it
	// goes to b's TUN in far fewer writes than datagrams.
	if b.px.workers[0].uso && sb.RxWrites > sb.RxPackets-segs/2 {
		t.Errorf("with USO, %d packets took %d TUN writes", sb.RxPackets, sb.RxWrites)
	}
}

var errWrongDatagram = errors.New("wrong datagram")

func readDatagram(c *net.UDPConn, want []byte) error {
	buf := make([]byte, 2048)
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	n, err := c.Read(buf)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("none within 5 s: %w", err)
	}
	if err != nil {
		return err
	}
	if string(buf[:n]) != string(want) {
		return fmt.Errorf("%w: got %d bytes % x..., want %d bytes % x...", errWrongDatagram, n, buf[:min(n, 8)], len(want), want[:min(len(want), 8)])
	}
	return nil
}
