package wgbind

import (
	"net/netip"
	"sync"
	"time"
)

// A handshake initiation: type 1 in a little-endian word, 148 bytes in all.
const (
	msgInitiation = 1
	initiationLen = 148
)

// maxInitiations bounds the initiations kept (one per endpoint the device dialled
// lately); past it, those older than initiationAge go.
const maxInitiations = 4096

// initiationAge is how long a kept initiation may be sent again: wireguard-go's
// REKEY_TIMEOUT, after which the device sends a new one itself.
const initiationAge = 5 * time.Second

// initiations keeps the last handshake initiation the device sent to each endpoint,
// so that a peer moved to another endpoint while its handshake is unanswered gets
// that initiation there at once, not at the device's retry 5 s later.
type initiations struct {
	mu   sync.Mutex
	last map[netip.AddrPort]initiation
}

type initiation struct {
	at time.Time
	p  [initiationLen]byte
}

// isInitiation reports whether p is a handshake initiation.
func isInitiation(p []byte) bool {
	return len(p) == initiationLen && p[0] == msgInitiation && p[1] == 0 && p[2] == 0 && p[3] == 0
}

// keep records the initiations among bufs, sent to to.
func (in *initiations) keep(bufs [][]byte, to netip.AddrPort) {
	for _, p := range bufs {
		if !isInitiation(p) {
			continue
		}
		now := time.Now()
		in.mu.Lock()
		if in.last == nil {
			in.last = make(map[netip.AddrPort]initiation)
		}
		if len(in.last) >= maxInitiations {
			for ep, i := range in.last {
				if now.Sub(i.at) > initiationAge {
					delete(in.last, ep)
				}
			}
		}
		if _, ok := in.last[to]; ok || len(in.last) < maxInitiations {
			i := initiation{at: now}
			copy(i.p[:], p)
			in.last[to] = i
		}
		in.mu.Unlock()
	}
}

// take returns (a copy of) the initiation sent to from within initiationAge, and
// forgets it.
func (in *initiations) take(from netip.AddrPort) ([]byte, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	i, ok := in.last[from]
	if !ok || time.Since(i.at) > initiationAge {
		return nil, false
	}
	delete(in.last, from)
	return i.p[:], true
}

// ResendInitiation sends to to the handshake initiation the device sent to from in
// the last 5 s, if any, and reports whether it did. Call it when a peer's endpoint
// moves from from to to: an unanswered handshake is answered on the new way within
// a round trip instead of the device's next try. The peer takes one initiation
// once (its timestamp must grow): the copy is dropped as a replay there if the
// first arrived.
func (b *Bind) ResendInitiation(from, to netip.AddrPort) (bool, error) {
	p, ok := b.inits.take(from)
	if !ok {
		return false, nil
	}
	if err := b.Send([][]byte{p}, &Endpoint{ap: to}); err != nil {
		return false, err
	}
	return true, nil
}
