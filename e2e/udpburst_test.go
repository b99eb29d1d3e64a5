package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/netns"
)

// udpBurst sends n datagrams of one size as fast as a loop can from a socket in pod
// from to dst in pod to, and checks that each arrives on its own and whole. Bursts of
// equal datagrams are what weftd's udp path batches: on egress into UDP GSO runs
// (still one inner packet per datagram on the wire), on ingress into coalesced UDP
// for flannel0 (TUN USO); a flanneld peer must see and send plain datagrams.
func udpBurst(t *testing.T, from, to *netns.NS, dst string, n int) {
	t.Helper()
	var rc, sc *net.UDPConn
	if err := to.Do(func() (err error) {
		rc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(dst)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := rc.SetReadBuffer(1 << 20); err != nil {
		t.Fatal(err)
	}
	if err := from.Do(func() (err error) {
		sc, err = net.DialUDP("udp4", nil, rc.LocalAddr().(*net.UDPAddr))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	const size = 200
	msg := func(i int) string { return fmt.Sprintf("%-*s", size, fmt.Sprintf("datagram %04d", i)) }
	for i := range n {
		if _, err := sc.Write([]byte(msg(i))); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	buf := make([]byte, 2048)
	for len(got) < n {
		if err := rc.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		k, err := rc.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%d of %d datagrams arrived to %s", len(got), n, dst)
		}
		if err != nil {
			t.Fatal(err)
		}
		if k != size || got[string(buf[:k])] {
			t.Fatalf("datagram of %d bytes (want %d), repeated %v: %q", k, size, got[string(buf[:k])], buf[:min(k, 20)])
		}
		got[string(buf[:k])] = true
	}
	for i := range n {
		if !got[msg(i)] {
			t.Fatalf("datagram %d missing", i)
		}
	}
}
