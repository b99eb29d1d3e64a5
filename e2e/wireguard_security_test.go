package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/blake2s"
	"golang.org/x/crypto/chacha20poly1305"
)

// The size of the datagram the pods exchange in TestWireGuardReplay: unlike any ping
// or keepalive, its transport message (16 bytes of header, the inner packet padded to
// 16, a 16-byte tag) is 848 bytes long.
const (
	replayPayload   = 777
	replayTransport = 16 + (20+8+replayPayload+15)/16*16 + 16
	replayCopies    = 3
)

// TestWireGuardReplay: weftd (a) and a stock wireguard-go host (b). A datagram from
// b's pod to a's pod is captured on b's eth0 as WireGuard sent it (an AF_PACKET
// socket), then sent again, replayCopies times, from a UDP socket on b's address to
// weftd's port; capture on a's eth0 shows each copy arrive. Then a fresh datagram
// from b's pod: once it is in a's pod, weftd's device has been through the copies
// before it (one socket, one peer queue, in order). The copies must not reach the
// pod, must not move b's endpoint to the copies' port (a packet the device takes
// does), and each must be counted as a drop in
// weft_wireguard_dropped_packets_total{device="flannel-wg"} (any reason).
func TestWireGuardReplay(t *testing.T) {
	p := newWGStockPair(t)
	a, b := p.a, p.b
	addrA, addrB := netip.MustParseAddr(a.ip), netip.MustParseAddr(b.ip)
	weftEP := netip.AddrPortFrom(addrA, uint16(p.portA))
	capB, capA := capture(t, b.ns, "eth0"), capture(t, a.ns, "eth0")

	dst := netip.AddrPortFrom(netip.MustParseAddr(p.podA), 7001)
	sink := sinkTokens(t, udpIn(t, a.pod, dst))
	from := udpIn(t, b.pod, netip.AddrPortFrom(netip.MustParseAddr(p.podB), 0))
	send := func(tok string) {
		t.Helper()
		if _, err := from.WriteToUDPAddrPort(tokenPayload(tok, replayPayload), dst); err != nil {
			t.Fatal(err)
		}
		sink.await(t, tok)
	}

	send("weft-replay-original")
	orig := capB.next(t, 5*time.Second, wgTransportFrom(addrB, weftEP, replayTransport))
	if len(orig.payload) != replayTransport || orig.src.Port() != 51820 {
		t.Fatalf("captured %d bytes from %v, want %d from %s:51820", len(orig.payload), orig.src, replayTransport, b.ip)
	}
	counter := binary.LittleEndian.Uint64(orig.payload[8:16])
	capA.next(t, 5*time.Second, func(u udpDatagram) bool { return bytes.Equal(u.payload, orig.payload) })
	dropsBefore, byBefore := wgDrops(t, a)
	peerBefore, ok := uapiPeers(t, p.weftSock())[p.stock.key]
	if !ok || peerBefore.endpoint != b.ip+":51820" {
		t.Fatalf("peer b on weftd's device: %+v (present %v), want endpoint %s:51820", peerBefore, ok, b.ip)
	}

	replayer := udpIn(t, b.ns, netip.AddrPortFrom(addrB, 0))
	rport := replayer.LocalAddr().(*net.UDPAddr).AddrPort().Port()
	for range replayCopies {
		if _, err := replayer.WriteToUDPAddrPort(orig.payload, weftEP); err != nil {
			t.Fatal(err)
		}
	}
	for i := range replayCopies {
		u := capA.next(t, 5*time.Second, func(u udpDatagram) bool {
			return u.src.Port() == rport && bytes.Equal(u.payload, orig.payload)
		})
		if u.src.Addr() != addrB || u.dst != weftEP {
			t.Fatalf("copy %d arrived as %v -> %v", i, u.src, u.dst)
		}
	}
	send("weft-replay-after")

	if n := sink.count("weft-replay-original"); n != 1 {
		t.Fatalf("the datagram of transport counter %d reached a's pod %d times, want once: weftd's device took %d replayed copies",
			counter, n, n-1)
	}
	peerAfter := uapiPeers(t, p.weftSock())[p.stock.key]
	if peerAfter.endpoint != peerBefore.endpoint {
		t.Errorf("b's endpoint on weftd's device moved from %s to %s (the replayed copies' source port is %d)",
			peerBefore.endpoint, peerAfter.endpoint, rport)
	}
	dropsAfter, byAfter := wgDrops(t, a)
	t.Logf("transport message of counter %d (%d bytes) replayed %d times from %s:%d; drops counted by weftd: %v (by reason %v)",
		counter, len(orig.payload), replayCopies, b.ip, rport, dropsAfter-dropsBefore, wgDropDelta(byBefore, byAfter))
	if got := dropsAfter - dropsBefore; got != replayCopies {
		t.Errorf("weft_wireguard_dropped_packets_total{device=flannel-wg} moved by %v across %d replayed transport messages, want %d "+
			"(by reason: %v; reasons weftd knows: %v)", got, replayCopies, replayCopies, wgDropDelta(byBefore, byAfter), mapKeys(byAfter))
	}
}

// TestWireGuardRekey: weftd (a) and a stock wireguard-go host (b), their pods pinging
// each other every 10 ms both ways. Mid-flow, the stock host starts a new session
// as it would at RekeyAfterTime, weftd's current one live: one `wg set` removes
// weftd's peer and adds it again (with a persistent keepalive, so that it starts
// at once rather than with its next packet), so wireguard-go, without a keypair,
// sends weftd a handshake initiation; weftd answers, and both move to the new
// keypair. (Unlike a timed rekey, wireguard-go drops its old keypairs: what weftd
// sends on the old one in the round trip is lost, hence rekeyMaxLoss.) Proven by each
// device's last handshake (UAPI, to the nanosecond) moving, and by b's transport
// messages on a's eth0 naming a new receiver index. The pings lose at most
// rekeyMaxLoss each way, and weftd counts no drop for any of it.
func TestWireGuardRekey(t *testing.T) {
	const (
		pings        = 300
		interval     = 10 * time.Millisecond
		rekeyMaxLoss = 3
	)
	p := newWGStockPair(t)
	a, b := p.a, p.b
	addrB := netip.MustParseAddr(b.ip)
	weftEP := netip.AddrPortFrom(netip.MustParseAddr(a.ip), uint16(p.portA))
	capA := capture(t, a.ns, "eth0")

	hsA := uapiPeers(t, p.weftSock())[p.stock.key].handshake
	hsB := uapiPeers(t, p.stock.sock)[p.keyA].handshake
	if hsA.IsZero() || hsB.IsZero() {
		t.Fatalf("no handshake before the rekey: weftd %v, wireguard-go %v", hsA, hsB)
	}
	dropsBefore, byBefore := wgDrops(t, a)

	ab := startFlowPing(t, a.pod, p.podB, pings, interval)
	ba := startFlowPing(t, b.pod, p.podA, pings, interval)
	ab.awaitReplies(t, 30)
	ba.awaitReplies(t, 30)
	old := binary.LittleEndian.Uint32(capA.next(t, 5*time.Second, wgTransportFrom(addrB, weftEP, wgTransportMin)).payload[4:8])

	rekeyAt := time.Now()
	wgRun(p.c, b, "wg", "set", "flannel-wg", "peer", p.keyA, "remove",
		"peer", p.keyA, "endpoint", weftEP.String(), "allowed-ips", p.stock.spec.PeerAllowed.String(),
		"persistent-keepalive", "25")
	var newA, newB time.Time
	eventually(t, 5*time.Second, func() error {
		newA = uapiPeers(t, p.weftSock())[p.stock.key].handshake
		newB = uapiPeers(t, p.stock.sock)[p.keyA].handshake
		if !newA.After(hsA) || !newB.After(hsB) {
			return fmt.Errorf("last handshake: weftd %v (before %v), wireguard-go %v (before %v)", newA, hsA, newB, hsB)
		}
		return nil
	})
	// b's packets to a now name the receiver index of weftd's new keypair.
	cur := binary.LittleEndian.Uint32(capA.next(t, 5*time.Second, func(u udpDatagram) bool {
		return wgTransportFrom(addrB, weftEP, wgTransportMin)(u) && binary.LittleEndian.Uint32(u.payload[4:8]) != old
	}).payload[4:8])
	if ab.replies() >= pings || ba.replies() >= pings {
		t.Fatalf("the pings were over before the new session: %d and %d replies", ab.replies(), ba.replies())
	}

	within := time.Duration(pings)*interval + 10*time.Second
	sentAB, gotAB, repAB := ab.wait(t, within)
	sentBA, gotBA, repBA := ba.wait(t, within)
	t.Logf("rekey %v into the flow: weftd's handshake %v after the wg set, wireguard-go's %v; receiver index %#x -> %#x; "+
		"a->b %d/%d (longest gap %v), b->a %d/%d (longest gap %v)",
		rekeyAt.Sub(firstOr(repAB, rekeyAt)).Round(time.Millisecond), newA.Sub(rekeyAt).Round(time.Microsecond),
		newB.Sub(rekeyAt).Round(time.Microsecond), old, cur,
		gotAB, sentAB, longestGap(repAB), gotBA, sentBA, longestGap(repBA))
	if newA.Before(rekeyAt) || newB.Before(rekeyAt) {
		t.Errorf("the new handshakes (weftd %v, wireguard-go %v) are older than the wg set at %v", newA, newB, rekeyAt)
	}
	for _, f := range []struct {
		name      string
		sent, got int
	}{{"a->b", sentAB, gotAB}, {"b->a", sentBA, gotBA}} {
		if f.sent != pings || f.sent-f.got > rekeyMaxLoss {
			t.Errorf("pings %s across the rekey: %d of %d sent came back, want at most %d lost of %d", f.name, f.got, f.sent, rekeyMaxLoss, pings)
		}
	}
	if dropsAfter, byAfter := wgDrops(t, a); dropsAfter != dropsBefore {
		t.Errorf("weftd counted %v drops across a legitimate rekey: %v", dropsAfter-dropsBefore, wgDropDelta(byBefore, byAfter))
	}
}

func firstOr(ts []time.Time, or time.Time) time.Time {
	if len(ts) == 0 {
		return or
	}
	return ts[0]
}

func longestGap(ts []time.Time) time.Duration {
	var g time.Duration
	for i := 1; i < len(ts); i++ {
		g = max(g, ts[i].Sub(ts[i-1]))
	}
	return g
}

// TestWireGuardHandshakeFlood: a third host floods weftd's WireGuard port with
// bursts of handshake initiations from unknown keys, each with a valid mac1 (wgInitiationTo),
// while a's pod pings the stock wireguard-go host's pod every 10 ms. weftd's device
// goes under load and answers with cookie replies: each one that comes back to the
// flooder is checked to be a real one, for one of the flood's initiations (its
// receiver index is that initiation's sender index, and its cookie decrypts with
// XChaCha20-Poly1305 under HASH("cookie--" || weftd's public key), with that
// initiation's mac1 as associated data). At least one must come, each must be
// counted as handshake_under_load, the pings must come back (95%), and the stock
// peer's session is the one it had.
func TestWireGuardHandshakeFlood(t *testing.T) {
	const (
		pings    = 200
		interval = 10 * time.Millisecond
		// Bursts: the device is under load while its handshake queue holds 128 or
		// more (and for a second after). A steady stream it can keep up with on an
		// idle machine (8 a millisecond, two CPUs) does not get there every time;
		// 256 back to back every 20 ms does.
		burst, every = 256, 20 * time.Millisecond
	)
	p := newWGStockPair(t)
	a := p.a
	m := p.c.addHost("m", "lan1")
	pubA, err := base64.StdEncoding.DecodeString(p.keyA)
	if err != nil || len(pubA) != 32 {
		t.Fatalf("public key %q of weftd: %v", p.keyA, err)
	}
	hsBefore := uapiPeers(t, p.weftSock())[p.stock.key].handshake
	_, byBefore := wgDrops(t, a)

	inits := make([][]byte, 1024)
	mac1 := map[uint32][]byte{} // by sender index
	for i := range inits {
		inits[i] = wgInitiationTo(t, pubA)
		mac1[binary.LittleEndian.Uint32(inits[i][4:8])] = inits[i][116:132]
	}
	cookieKey := blake2s.Sum256(append([]byte("cookie--"), pubA...))
	aead, err := chacha20poly1305.NewX(cookieKey[:])
	if err != nil {
		t.Fatal(err)
	}

	conn := udpIn(t, m.ns, netip.AddrPortFrom(netip.MustParseAddr(m.ip), 0))
	to := netip.AddrPortFrom(netip.MustParseAddr(a.ip), uint16(p.portA))
	ping := startFlowPing(t, a.pod, p.podB, pings, interval)
	ping.awaitReplies(t, 10)

	var sent, sendErrs, cookies, forged, other atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for j := range burst {
				if _, err := conn.WriteToUDPAddrPort(inits[(i*burst+j)%len(inits)], to); err != nil {
					sendErrs.Add(1)
				} else {
					sent.Add(1)
				}
			}
		}
	})
	var reader sync.WaitGroup
	reader.Go(func() {
		buf := make([]byte, 2048)
		for {
			n, _, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if n != wgCookieSize || binary.LittleEndian.Uint32(buf) != wgCookieReply {
				other.Add(1)
				continue
			}
			ad, ok := mac1[binary.LittleEndian.Uint32(buf[4:8])]
			if _, err := aead.Open(nil, buf[8:32], buf[32:64], ad); !ok || err != nil {
				forged.Add(1)
				continue
			}
			cookies.Add(1)
		}
	})
	sentPings, gotPings, _ := ping.wait(t, time.Duration(pings)*interval+20*time.Second)
	close(stop)
	wg.Wait()
	// Replies in flight come within the deadline; then the reader ends.
	_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	reader.Wait()

	_, byAfter := wgDrops(t, a)
	delta := wgDropDelta(byBefore, byAfter)
	t.Logf("flood of %d initiations (%d send errors) from %s: %d cookie replies, %d not for our initiations or not decrypting, %d other datagrams; "+
		"pings %d/%d; drops counted %v", sent.Load(), sendErrs.Load(), m.ip, cookies.Load(), forged.Load(), other.Load(), gotPings, sentPings, delta)
	if sent.Load() == 0 {
		t.Fatalf("the flood sent nothing (%d send errors)", sendErrs.Load())
	}
	if exited, err := a.daemon.Exited(); exited {
		t.Fatalf("weftd ended under the flood: %v\n%s", err, a.daemon.LogTail(20))
	}
	if cookies.Load() == 0 {
		t.Errorf("no cookie reply came back for %d handshake initiations: weftd's device never went under load or does not answer", sent.Load())
	}
	if forged.Load() != 0 || other.Load() != 0 {
		t.Errorf("the flooder got %d cookie replies that are not for its initiations and %d other datagrams", forged.Load(), other.Load())
	}
	if got := delta["handshake_under_load"]; got < float64(cookies.Load()) || got > float64(sent.Load()) {
		t.Errorf("handshake_under_load moved by %v, want between the %d cookie replies received and the %d initiations sent", got, cookies.Load(), sent.Load())
	}
	if sentPings != pings || float64(gotPings) < 0.95*pings {
		t.Errorf("pings a's pod -> the stock host's pod during the flood: %d of %d came back, want at least 95%% of %d", gotPings, sentPings, pings)
	}
	peers := uapiPeers(t, p.weftSock())
	if hs := peers[p.stock.key].handshake; len(peers) != 1 || !hs.Equal(hsBefore) {
		t.Errorf("weftd's device after the flood: %d peers (want the stock host alone), its handshake %v (was %v)", len(peers), hs, hsBefore)
	}
	p.c.ping(a.pod, p.podB)
}
