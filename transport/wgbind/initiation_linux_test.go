package wgbind

import (
	"bytes"
	"golang.zx2c4.com/wireguard/conn"
	"net"
	"net/netip"
	"testing"
	"time"
)

// udpListener is a plain UDP socket on loopback, where a Bind sends.
func udpListener(t *testing.T) (*net.UDPConn, netip.AddrPort) {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// TestResendInitiation: the last initiation sent to an endpoint goes again, byte
// for byte, to another one, once; a transport message or an initiation-sized
// datagram of another type is never kept, and nothing is kept for an endpoint the
// device did not dial.
func TestResendInitiation(t *testing.T) {
	b, _, _ := open(t)
	oldC, oldEP := udpListener(t)
	newC, newEP := udpListener(t)
	initiation := func(fill byte) []byte {
		p := bytes.Repeat([]byte{fill}, initiationLen)
		copy(p, []byte{msgInitiation, 0, 0, 0})
		return p
	}
	notInit := bytes.Repeat([]byte{4}, initiationLen) // a transport message of 148 bytes
	first, second := initiation(0xa1), initiation(0xa2)
	for _, p := range [][]byte{first, second, notInit} {
		if err := b.Send([][]byte{p}, &Endpoint{ap: oldEP}); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 512)
	for range 3 { // all three reached the old endpoint
		_ = oldC.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, _, err := oldC.ReadFromUDPAddrPort(buf); err != nil {
			t.Fatal(err)
		}
	}
	if sent, err := b.ResendInitiation(newEP, oldEP); sent || err != nil {
		t.Fatalf("from an endpoint never dialled: sent %v, %v", sent, err)
	}
	if sent, err := b.ResendInitiation(oldEP, newEP); !sent || err != nil {
		t.Fatalf("sent %v, %v; want the last initiation sent again", sent, err)
	}
	_ = newC.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err := newC.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:n], second) {
		t.Fatalf("new endpoint got %d bytes starting % x, want the last initiation (a2...)", n, buf[:min(n, 8)])
	}
	if c := b.Initiations(); c.Resent != 1 {
		t.Errorf("counted %+v, want 1 resent", c)
	}
	if sent, _ := b.ResendInitiation(oldEP, newEP); sent {
		t.Fatal("the same initiation sent again twice")
	}
}

// TestInitiationsAge: an initiation older than the device's retry is not sent
// again; the table stays bounded, and due forgets the old ones.
func TestInitiationsAge(t *testing.T) {
	var in initiations
	p := make([]byte, initiationLen)
	p[0] = msgInitiation
	ep := netip.MustParseAddrPort("192.0.2.1:51820")
	in.keep([][]byte{p}, ep)
	i := in.last[ep]
	i.at = time.Now().Add(-initiationAge - time.Second)
	in.last[ep] = i
	if _, ok := in.take(ep); ok {
		t.Fatal("an initiation older than 5 s taken")
	}
	for j := range maxInitiations + 10 {
		in.keep([][]byte{p}, netip.AddrPortFrom(netip.MustParseAddr("198.51.100.1"), uint16(j+1)))
	}
	if len(in.last) > maxInitiations {
		t.Fatalf("%d initiations kept, at most %d", len(in.last), maxInitiations)
	}
	// The aged one still holds its place until due: 11 of the new ones find no room.
	if n := in.notKept.Load(); n != 11 {
		t.Fatalf("%d initiations counted not kept, want the 11 past the table's %d", n, maxInitiations)
	}
	if out := in.due(time.Now().Add(initiationAge + time.Second)); len(out) != 0 || len(in.last) != 0 {
		t.Fatalf("after initiationAge: %d due, %d kept; want none", len(out), len(in.last))
	}
	in.keep([][]byte{p}, ep)
	if len(in.last) != 1 {
		t.Fatalf("%d kept once swept, want the new one", len(in.last))
	}
}

// TestRetransmitInitiation: an initiation without a response goes again, byte for
// byte, to where it went, about every second, at most maxRetransmits times; one
// whose response came (through the Bind's receive function) does not.
func TestRetransmitInitiation(t *testing.T) {
	b, fns, port := open(t)
	peer, peerEP := udpListener(t)
	initiation := bytes.Repeat([]byte{0xb7}, initiationLen)
	copy(initiation, []byte{msgInitiation, 0, 0, 0, 9, 0, 0, 0}) // sender index 9
	sent := time.Now()
	if err := b.Send([][]byte{initiation}, &Endpoint{ap: peerEP}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	var at []time.Duration
	for {
		_ = peer.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _, err := peer.ReadFromUDPAddrPort(buf)
		if err != nil {
			break // none in 2 s: the retransmits are over
		}
		if !bytes.Equal(buf[:n], initiation) {
			t.Fatalf("the peer got %d bytes % x..., want the initiation", n, buf[:min(n, 8)])
		}
		at = append(at, time.Since(sent))
	}
	if len(at) != 1+maxRetransmits {
		t.Fatalf("the initiation arrived %d times (at %v), want once and %d retransmits", len(at), at, maxRetransmits)
	}
	if c := b.Initiations(); c.Retransmitted != maxRetransmits || c.Resent != 0 || c.NotKept != 0 {
		t.Errorf("counted %+v, want %d retransmitted", c, maxRetransmits)
	}
	for i, d := range at[1:] {
		if d < time.Duration(i+1)*retransmitAfter {
			t.Errorf("retransmit %d at %v, before %v", i+1, d, time.Duration(i+1)*retransmitAfter)
		}
	}

	// A new initiation, answered: a response to sender index 10 reaches the Bind.
	copy(initiation[4:], []byte{10, 0, 0, 0})
	if err := b.Send([][]byte{initiation}, &Endpoint{ap: peerEP}); err != nil {
		t.Fatal(err)
	}
	_ = peer.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, _, err := peer.ReadFromUDPAddrPort(buf); err != nil {
		t.Fatal(err)
	}
	response := make([]byte, responseLen)
	copy(response, []byte{msgResponse, 0, 0, 0, 77, 0, 0, 0, 10, 0, 0, 0})
	if _, err := peer.WriteToUDPAddrPort(response, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)); err != nil {
		t.Fatal(err)
	}
	packets, sizes, eps := [][]byte{make([]byte, 2048)}, make([]int, 1), make([]conn.Endpoint, 1)
	if n, err := fns[0](packets, sizes, eps); err != nil || n != 1 || sizes[0] != responseLen {
		t.Fatalf("receive: %d datagrams (%v), sizes %v", n, err, sizes)
	}
	_ = peer.SetReadDeadline(time.Now().Add(retransmitAfter + time.Second))
	if n, _, err := peer.ReadFromUDPAddrPort(buf); err == nil {
		t.Fatalf("an answered initiation sent again (%d bytes)", n)
	}
}

// TestAnsweringSupersedesInitiation: once the device sends a handshake response to
// an endpoint (it answered the peer's own initiation), the initiation it sent there
// before is neither retransmitted nor sent again on a move.
func TestAnsweringSupersedesInitiation(t *testing.T) {
	b, _, _ := open(t)
	peer, peerEP := udpListener(t)
	_, otherEP := udpListener(t)
	initiation := bytes.Repeat([]byte{0xc3}, initiationLen)
	copy(initiation, []byte{msgInitiation, 0, 0, 0, 5, 0, 0, 0})
	response := make([]byte, responseLen)
	copy(response, []byte{msgResponse, 0, 0, 0, 6, 0, 0, 0, 41, 0, 0, 0})
	for _, p := range [][]byte{initiation, response} {
		if err := b.Send([][]byte{p}, &Endpoint{ap: peerEP}); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 512)
	for _, want := range []int{initiationLen, responseLen} {
		_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _, err := peer.ReadFromUDPAddrPort(buf)
		if err != nil || n != want {
			t.Fatalf("the peer got %d bytes (%v), want %d", n, err, want)
		}
	}
	if sent, err := b.ResendInitiation(peerEP, otherEP); sent || err != nil {
		t.Fatalf("a superseded initiation moved: sent %v, %v", sent, err)
	}
	_ = peer.SetReadDeadline(time.Now().Add(retransmitAfter + time.Second))
	if n, _, err := peer.ReadFromUDPAddrPort(buf); err == nil {
		t.Fatalf("a superseded initiation sent again (%d bytes)", n)
	}
}
