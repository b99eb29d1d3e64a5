package wgbind

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Handshake messages: the type in a little-endian word, then the sender's index;
// an initiation is 148 bytes, a response 92, with the initiator's index (the
// initiation's sender) at offset 8.
const (
	msgInitiation = 1
	initiationLen = 148
	msgResponse   = 2
	responseLen   = 92
)

// maxInitiations bounds the initiations kept (one per endpoint the device dialled
// in the last initiationAge: due drops older ones every retransmitTick); past it, a
// new endpoint's is not kept. 16,384 holds a 5,000-peer cluster's first handshakes,
// at about 200 bytes each.
const maxInitiations = 16384

// initiationAge is how long a kept initiation may be sent again: wireguard-go's
// REKEY_TIMEOUT, after which the device sends a new one itself.
const initiationAge = 5 * time.Second

// Retransmits: an initiation without a response is sent again, as it was, after
// retransmitAfter, twice that, ... up to maxRetransmits times within
// initiationAge, checked every retransmitTick. wireguard-go sends a new one only
// after 5 s: an initiation dropped because the peer did not know our key yet (its
// weftd had not read our lease) cost 5 s of a new host's first packets.
const (
	retransmitAfter = time.Second
	maxRetransmits  = 3
	retransmitTick  = 250 * time.Millisecond
)

// initiations keeps the last handshake initiation the device sent to each endpoint:
// a peer moved to another endpoint while its handshake is unanswered gets it there
// at once (ResendInitiation), and one with no response is sent again (due), rather
// than at the device's retry 5 s later.
type initiations struct {
	mu   sync.Mutex
	last map[netip.AddrPort]*initiation
	// What became of the initiations (Bind.Initiations).
	retransmitted, resent, notKept atomic.Uint64
}

// Initiations counts the initiations the Bind sent again, and those it could not
// keep to send again.
func (b *Bind) Initiations() InitiationCounts {
	return InitiationCounts{Retransmitted: b.inits.retransmitted.Load(), Resent: b.inits.resent.Load(),
		NotKept: b.inits.notKept.Load()}
}

type initiation struct {
	at       time.Time
	sends    int  // retransmits so far
	answered bool // a response to it came
	p        [initiationLen]byte
}

// isInitiation reports whether p is a handshake initiation.
func isInitiation(p []byte) bool {
	return len(p) == initiationLen && binary.LittleEndian.Uint32(p) == msgInitiation
}

// isResponse reports whether p is a handshake response.
func isResponse(p []byte) bool {
	return len(p) == responseLen && binary.LittleEndian.Uint32(p) == msgResponse
}

// keep records the initiations among bufs, sent to to. A response among them, sent
// to to, forgets the initiation kept for to: the device answered the peer's
// handshake there, so its own is superseded. Sent again, it would be taken by a
// peer whose device was made again since (it remembers no timestamp), answered with
// a response this device can no longer use, and leave that peer holding a session
// nobody has (TestWireGuardRepair lost its pods' pings for 5 s so in CI).
func (in *initiations) keep(bufs [][]byte, to netip.AddrPort) {
	for _, p := range bufs {
		if isResponse(p) {
			in.mu.Lock()
			delete(in.last, to)
			in.mu.Unlock()
			continue
		}
		if !isInitiation(p) {
			continue
		}
		now := time.Now()
		in.mu.Lock()
		if in.last == nil {
			in.last = make(map[netip.AddrPort]*initiation)
		}
		// No sweep here: a full table was swept on every initiation, 48 µs each
		// among 5,000 peers handshaking (BenchmarkKeep). due sweeps.
		if _, ok := in.last[to]; ok || len(in.last) < maxInitiations {
			i := &initiation{at: now}
			copy(i.p[:], p)
			in.last[to] = i
		} else {
			in.notKept.Add(1)
		}
		in.mu.Unlock()
	}
}

// responded notes p, a datagram the device receives, when it is a handshake
// response: the initiation it answers is not sent again.
func (in *initiations) responded(p []byte) {
	if !isResponse(p) {
		return
	}
	idx := binary.LittleEndian.Uint32(p[8:])
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, i := range in.last {
		if binary.LittleEndian.Uint32(i.p[4:]) == idx {
			i.answered = true
		}
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
	return append([]byte(nil), i.p[:]...), true
}

// retransmit is an initiation due again, and where.
type retransmit struct {
	p  []byte
	to netip.AddrPort
}

// due returns the initiations without a response that are due to be sent again at
// now, and counts them sent; it forgets those older than initiationAge.
func (in *initiations) due(now time.Time) []retransmit {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []retransmit
	for to, i := range in.last {
		age := now.Sub(i.at)
		if age > initiationAge {
			delete(in.last, to)
			continue
		}
		if i.answered || i.sends >= maxRetransmits || age >= initiationAge-retransmitTick ||
			age < time.Duration(i.sends+1)*retransmitAfter {
			continue
		}
		i.sends++
		out = append(out, retransmit{append([]byte(nil), i.p[:]...), to})
	}
	return out
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
	b.inits.resent.Add(1)
	return true, nil
}

// retransmits sends the initiations due again, every retransmitTick until done
// closes. Their Endpoints are fresh: the route's source address.
func (b *Bind) retransmits(done <-chan struct{}) {
	t := time.NewTicker(retransmitTick)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			for _, r := range b.inits.due(now) {
				if err := b.send([][]byte{r.p}, &Endpoint{ap: r.to}); err != nil {
					b.log.Debug("handshake initiation sent again", zap.Stringer("to", r.to), zap.Error(err))
				} else {
					b.inits.retransmitted.Add(1)
				}
			}
		}
	}
}
