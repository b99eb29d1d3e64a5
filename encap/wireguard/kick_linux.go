package wireguard

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/device"
)

// kickDelay is how long the side with the smaller public key waits for a handshake
// with a peer it added before it starts one itself.
const kickDelay = time.Second

// kicker starts a handshake with each peer a userspace device is given, so that a
// peer still holding a session with this host's previous device (weftd restarted,
// the device made again, a new key) moves to the new one at once, rather than after
// WireGuard's own timeouts (keepalive 10 s + rekey 5 s). Two hosts that add each
// other at the same moment must not both start one: their initiations cross, each
// answers the other's and drops the answer to its own, and neither has a session
// until the retry 5 s later. So the side whose public key is the larger starts at
// once; the other waits kickDelay and starts only with the peers it still has no
// handshake with.
type kicker struct {
	dev     *device.Device
	mu      sync.Mutex
	own     device.NoisePublicKey
	pending map[device.NoisePublicKey]int // peers to kick late, with the keepalive (s) to turn on
	timer   *time.Timer
	closed  bool
}

// setOwn records this device's public key.
func (k *kicker) setOwn(pub [32]byte) {
	k.mu.Lock()
	k.own = pub
	k.mu.Unlock()
}

// waits reports whether this side waits kickDelay before it starts a handshake with
// peer key (our public key is not the larger of the two).
func (k *kicker) waits(key device.NoisePublicKey) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return bytes.Compare(k.own[:], key[:]) <= 0
}

// added starts a handshake with each peer in keys, now or after kickDelay. keepalive
// holds the persistent keepalive of the waiting side's new peers, which Configure
// left out: wireguard-go sends a keepalive, and so a handshake initiation, the moment
// a peer's keepalive is turned on, and two hosts adding each other at once then
// cross their initiations anyway (a pair stayed without a session for 15 s in CI).
// It is turned on after kickDelay.
func (k *kicker) added(keys []device.NoisePublicKey, keepalive map[device.NoisePublicKey]int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, key := range keys {
		if bytes.Compare(k.own[:], key[:]) > 0 {
			if p := k.dev.LookupPeer(key); p != nil {
				// At most one per RekeyTimeout; one a keepalive just sent counts.
				_ = p.SendHandshakeInitiation(false)
			}
			continue
		}
		if k.pending == nil {
			k.pending = map[device.NoisePublicKey]int{}
		}
		k.pending[key] = keepalive[key]
	}
	if len(k.pending) > 0 && k.timer == nil && !k.closed {
		k.timer = time.AfterFunc(kickDelay, k.late)
	}
}

// late turns on the pending peers' keepalives and starts a handshake with each
// pending peer that has had none.
func (k *kicker) late() {
	k.mu.Lock()
	pending := k.pending
	k.pending, k.timer = nil, nil
	closed := k.closed
	k.mu.Unlock()
	if closed {
		return
	}
	var on strings.Builder
	for key, secs := range pending {
		if secs > 0 {
			fmt.Fprintf(&on, "public_key=%s\nupdate_only=true\npersistent_keepalive_interval=%d\n", hex.EncodeToString(key[:]), secs)
		}
	}
	if on.Len() > 0 {
		_ = k.dev.IpcSet(on.String()) // a peer removed since is not made again (update_only)
	}
	cfg, err := k.dev.IpcGet()
	if err != nil {
		return
	}
	shook := handshaken(cfg)
	for key := range pending {
		if shook[key] {
			continue
		}
		if p := k.dev.LookupPeer(key); p != nil {
			_ = p.SendHandshakeInitiation(false)
		}
	}
}

// close stops a pending kick.
func (k *kicker) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	if k.timer != nil {
		k.timer.Stop()
	}
}

// handshaken reads a UAPI get body: the peers that have had a handshake.
func handshaken(cfg string) map[device.NoisePublicKey]bool {
	out := map[device.NoisePublicKey]bool{}
	var cur device.NoisePublicKey
	for line := range strings.Lines(cfg) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "public_key":
			cur = device.NoisePublicKey{}
			_, _ = hex.Decode(cur[:], []byte(v))
		case "last_handshake_time_sec":
			if v != "0" {
				out[cur] = true
			}
		}
	}
	return out
}
