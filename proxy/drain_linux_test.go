package proxy

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/testenv"
)

// TestDrainOnStop: what waits in a Proxy's socket and TUN queue when its Run's
// context ends is forwarded before they close (a hand-over's old weftd stops while
// the kernel still steers packets to it). Host b's Proxy runs only after a's
// datagrams are in its socket and its own pod's in its TUN queue, with a context
// already ended: each must reach the other pod.
func TestDrainOnStop(t *testing.T) {
	testenv.NeedRoot(t)
	l := newLab(t, labOpts{queues: 1, notRun: true})
	a, b := l.hosts[0], l.hosts[1]
	var inA, inB *net.UDPConn // a's pod's socket, b's
	if err := a.ns.Do(func() (err error) {
		inA, err = net.ListenUDP("udp4", &net.UDPAddr{IP: labPod[0].AsSlice()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inA.Close() })
	if err := b.ns.Do(func() (err error) {
		inB, err = net.ListenUDP("udp4", &net.UDPAddr{IP: labPod[1].AsSlice()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inB.Close() })
	// At most 200 each way: b's TUN queue holds 500 packets (txqueuelen).
	const n = 200
	for i := range n {
		if _, err := inA.WriteToUDP([]byte(fmt.Sprintf("to b %04d", i)), inB.LocalAddr().(*net.UDPAddr)); err != nil {
			t.Fatal(err)
		}
		// Into b's flannel0 queue as the call returns: nobody reads it yet.
		if _, err := inB.WriteToUDP([]byte(fmt.Sprintf("to a %04d", i)), inA.LocalAddr().(*net.UDPAddr)); err != nil {
			t.Fatal(err)
		}
	}
	// a's worker counts a datagram once sendmmsg handed it to the kernel, which
	// delivers it to b's socket before the call returns (the veth's receive runs
	// as the sender leaves the device).
	waitFor(t, "a to send every datagram", 5*time.Second, func() bool { return a.px.Stats().TxPackets >= n })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.px.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	for i := range n {
		if err := readDatagram(inB, []byte(fmt.Sprintf("to b %04d", i))); err != nil {
			t.Fatalf("datagram %d of %d queued in b's socket at stop (b took %d): %v", i, n, b.px.Stats().RxPackets, err)
		}
	}
	for i := range n {
		if err := readDatagram(inA, []byte(fmt.Sprintf("to a %04d", i))); err != nil {
			t.Fatalf("datagram %d of %d queued in b's TUN queue at stop (b sent %d): %v", i, n, b.px.Stats().TxPackets, err)
		}
	}
}
