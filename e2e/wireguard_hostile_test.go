package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/blake2s"
)

// WireGuard's message types and sizes (the whitepaper, section 5.4).
const (
	wgInitiation     = 1
	wgInitiationSize = 148
	wgResponse       = 2
	wgResponseSize   = 92
	wgCookieReply    = 3
	wgCookieSize     = 64
	wgTransport      = 4
	wgTransportMin   = 32 // header and an empty payload's tag
)

// wgInitiationTo makes a handshake initiation to the responder with public key pub
// from an unknown key: random sender index, ephemeral key, encrypted static key and
// timestamp, and a valid mac1 (BLAKE2s-128 keyed with HASH("mac1----" || pub) over
// the message up to mac1), so that the responder gets past its cheap check and does
// the Diffie-Hellman before it finds the static key undecryptable. mac2 is zero: no
// cookie.
func wgInitiationTo(t *testing.T, pub []byte) []byte {
	t.Helper()
	msg := make([]byte, wgInitiationSize)
	binary.LittleEndian.PutUint32(msg, wgInitiation)
	if _, err := rand.Read(msg[4:116]); err != nil {
		t.Fatal(err)
	}
	h, err := blake2s.New256(nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Write([]byte("mac1----"))
	h.Write(pub)
	mac, err := blake2s.New128(h.Sum(nil))
	if err != nil {
		t.Fatal(err)
	}
	mac.Write(msg[:116])
	copy(msg[116:132], mac.Sum(nil))
	return msg
}

// wgGarbage makes a datagram of junk: random bytes of a random length, or random
// bytes behind a WireGuard message type with that type's size (a transport message
// of any length), so that every branch of the device's receive path sees some.
func wgGarbage(r *mrand.Rand) []byte {
	var msg []byte
	switch r.IntN(6) {
	case 0:
		msg = make([]byte, wgInitiationSize)
		binary.LittleEndian.PutUint32(msg, wgInitiation)
	case 1:
		msg = make([]byte, wgResponseSize)
		binary.LittleEndian.PutUint32(msg, wgResponse)
	case 2:
		msg = make([]byte, wgCookieSize)
		binary.LittleEndian.PutUint32(msg, wgCookieReply)
	case 3:
		msg = make([]byte, wgTransportMin+r.IntN(1400))
		binary.LittleEndian.PutUint32(msg, wgTransport)
	default:
		msg = make([]byte, 1+r.IntN(1500))
		for i := range msg {
			msg[i] = byte(r.Uint32())
		}
		return msg
	}
	for i := 4; i < len(msg); i++ {
		msg[i] = byte(r.Uint32())
	}
	return msg
}

// TestWireGuardHostile: a third host on the LAN floods the WireGuard port of weftd on
// a with garbage datagrams and with handshake initiations from unknown keys (valid
// mac1, so each costs a a Diffie-Hellman until it is under load and asks for cookies)
// while a's pod pings b's across WireGuard: weftd lives through it, and the pings
// mostly come back. The drops are counted in /metrics by reason
// (weft_wireguard_dropped_packets_total, from the lines the device logs for them): junk
// of no message type, handshake messages without a valid mac1, initiations from
// unknown keys, and one handshake_under_load for each cookie reply a sent.
func TestWireGuardHostile(t *testing.T) {
	c := wgCluster(t)
	a, b, m := c.addHost("a", "lan1"), c.addHost("b", "lan1"), c.addHost("m", "lan1")
	startWG(c, a)
	startWG(c, b)
	envA, envB := c.waitSubnetEnv(a), c.waitSubnetEnv(b)
	c.attachPod(a, envA)
	podB := c.attachPod(b, envB)
	c.ping(a.pod, podB)
	keyA, portA := wgLeaseData(c, a)
	pubA, err := base64.StdEncoding.DecodeString(keyA)
	if err != nil || len(pubA) != 32 {
		t.Fatalf("public key %q of a: %v", keyA, err)
	}

	before := mustScrape(t, a)
	var conn *net.UDPConn
	if err := m.ns.Do(func() error {
		var err error
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(m.ip)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	to := &net.UDPAddr{IP: net.ParseIP(a.ip), Port: portA}

	// Pings every 20 ms for 10 s, a's pod to b's, while the flood runs.
	const pings = 500
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pingDone := make(chan struct{})
	var pingOut string
	var pingErr error
	go func() {
		defer close(pingDone)
		pingOut, pingErr = a.pod.Run(ctx, "ping", "-q", "-c", strconv.Itoa(pings), "-i", "0.02", "-W", "1", podB)
	}()

	// The flood: bursts of initiations and garbage, every millisecond, until the
	// pings are done. Initiations are made ahead (each needs fresh random bytes).
	inits := make([][]byte, 256)
	for i := range inits {
		inits[i] = wgInitiationTo(t, pubA)
	}
	var sentInit, sentJunk, sendErrs atomic.Uint64
	var flood sync.WaitGroup
	flood.Go(func() {
		r := mrand.New(mrand.NewPCG(1, 2))
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-pingDone:
				return
			case <-tick.C:
			}
			for j := range 8 {
				if _, err := conn.WriteToUDP(inits[(i*8+j)%len(inits)], to); err != nil {
					sendErrs.Add(1)
				} else {
					sentInit.Add(1)
				}
				if _, err := conn.WriteToUDP(wgGarbage(r), to); err != nil {
					sendErrs.Add(1)
				} else {
					sentJunk.Add(1)
				}
			}
		}
	})
	// What a sends back: cookie replies, when the initiations put it under load
	// (proof that they passed mac1 and reached the handshake queue).
	var cookies atomic.Uint64
	var reader sync.WaitGroup
	reader.Go(func() {
		buf := make([]byte, 2048)
		for {
			n, _, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if n == wgCookieSize && binary.LittleEndian.Uint32(buf) == wgCookieReply {
				cookies.Add(1)
			}
		}
	})
	start := time.Now()
	<-pingDone
	flood.Wait()
	elapsed := time.Since(start)
	// Replies in flight come within the deadline; then the reader ends.
	_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	reader.Wait()

	sent, got, err := pingSummary(pingOut)
	if err != nil {
		t.Fatalf("ping a's pod -> b's pod during the flood: %v (%v)\n%s", err, pingErr, pingOut)
	}
	t.Logf("flood of a's port %d over %.1fs: %d initiations from unknown keys, %d junk datagrams (%.0f/s), %d send errors; %d cookie replies from a; pings %d/%d came back (%d lost)",
		portA, elapsed.Seconds(), sentInit.Load(), sentJunk.Load(), float64(sentInit.Load()+sentJunk.Load())/elapsed.Seconds(),
		sendErrs.Load(), cookies.Load(), got, sent, sent-got)
	if sentInit.Load() == 0 || sentJunk.Load() == 0 {
		t.Fatalf("the flood sent nothing (%d send errors)", sendErrs.Load())
	}
	if exited, err := a.daemon.Exited(); exited {
		t.Fatalf("weftd on a ended under the flood: %v\n%s", err, a.daemon.LogTail(20))
	}
	if strings.Contains(a.logs(), "panic:") {
		t.Fatalf("weftd on a panicked:\n%s", a.daemon.LogTail(40))
	}
	if sent != pings || float64(got) < 0.95*float64(sent) {
		t.Fatalf("pings during the flood: %d of %d came back, want at least 95%% of %d", got, sent, pings)
	}
	// Still serving: the path, /metrics, and the peer's session.
	c.ping(a.pod, podB)
	after := mustScrape(t, a)
	if v := after.must(t, "weft_wireguard_device_info", "device", "flannel-wg"); v != 1 {
		t.Fatalf("weft_wireguard_device_info after the flood: %v", v)
	}
	// Counted: random junk (about a third of it lacks a message type), random bytes
	// behind an initiation's or response's type (mac1 fails), and the initiations from
	// unknown keys: refused with a cookie under load, or decrypted in vain before.
	dropped := func(reason string) float64 {
		return after.must(t, "weft_wireguard_dropped_packets_total", "device", "flannel-wg", "reason", reason) -
			before.must(t, "weft_wireguard_dropped_packets_total", "device", "flannel-wg", "reason", reason)
	}
	var total float64
	for _, r := range []string{"unknown_type", "invalid_mac1", "invalid_initiation", "invalid_response",
		"invalid_cookie_reply", "handshake_under_load", "disallowed_source"} {
		total += dropped(r)
		t.Logf("dropped %s: %v", r, dropped(r))
	}
	if dropped("unknown_type") == 0 || dropped("invalid_mac1") == 0 || dropped("invalid_initiation")+dropped("handshake_under_load") == 0 {
		t.Errorf("the flood's drops were not counted: unknown_type %v, invalid_mac1 %v, invalid_initiation %v, handshake_under_load %v",
			dropped("unknown_type"), dropped("invalid_mac1"), dropped("invalid_initiation"), dropped("handshake_under_load"))
	}
	if got := dropped("handshake_under_load"); got < float64(cookies.Load()) {
		t.Errorf("handshake_under_load %v, fewer than the %d cookie replies m received", got, cookies.Load())
	}
	if total > float64(sentInit.Load()+sentJunk.Load()) {
		t.Errorf("%v drops counted, more than the %d datagrams sent", total, sentInit.Load()+sentJunk.Load())
	}
	keyB, _ := wgLeaseData(c, b)
	if p, ok := wgPeers(c, a, "flannel-wg")[keyB]; !ok || p.handshake == 0 {
		t.Fatalf("peer b on a after the flood: %+v", p)
	}
	if n := len(wgPeers(c, a, "flannel-wg")); n != 1 {
		t.Fatalf("a has %d peers after the flood, want 1 (b)", n)
	}
}
