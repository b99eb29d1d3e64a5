package wgbind

import (
	"encoding/binary"
	"sync/atomic"
)

// A transport data message: type 4 in a little-endian word, the receiver's index,
// the counter (the nonce), then the sealed packet with its 16-byte tag.
const (
	msgTransport    = 4
	transportMinLen = 16 + 16
)

// Replay windows: the receiver keeps, per receiver index, which of the last
// windowBits counters it has seen, as the device's own filter does (RFC 6479's
// ring of blocks: moving forward clears whole blocks), so that it counts the
// transport messages the device drops as replays. wireguard-go drops those
// without a log line; this is weft's only way to count them.
const (
	blockBits  = 64
	ringBlocks = 128
	windowBits = (ringBlocks - 1) * blockBits
	// maxWindows bounds the receiver indexes followed (a few per peer: the current
	// session and the one before); more (made-up indexes) start them afresh.
	maxWindows = 1024
)

type window struct {
	top  uint64 // the highest counter seen
	ring [ringBlocks]uint64
}

// seen records counter c and reports whether the device will drop it as a replay:
// seen before, or too old for the window.
func (w *window) seen(c uint64) bool {
	block := c / blockBits
	if c > w.top {
		// Clear the blocks between the old top and the new one (all of them at most).
		for b, n := w.top/blockBits+1, 0; b <= block && n < ringBlocks; b, n = b+1, n+1 {
			w.ring[b%ringBlocks] = 0
		}
		w.top = c
	} else if w.top-c > windowBits {
		return true
	}
	word, bit := &w.ring[block%ringBlocks], uint64(1)<<(c%blockBits)
	if *word&bit != 0 {
		return true
	}
	*word |= bit
	return false
}

// replays follows the counters of the transport messages one receiver takes and
// counts the replayed ones. It runs before the device authenticates a message: a
// forged message that reuses a counter is counted too (and dropped by the device as
// undecryptable), and one that takes a counter first makes the genuine message
// count. Neither changes what the device accepts.
type replays struct {
	count   *atomic.Uint64
	last    uint32
	lastW   *window
	windows map[uint32]*window
}

func (r *replays) check(p []byte) {
	if len(p) < transportMinLen || binary.LittleEndian.Uint32(p) != msgTransport {
		return
	}
	idx, c := binary.LittleEndian.Uint32(p[4:]), binary.LittleEndian.Uint64(p[8:])
	w := r.lastW
	if w == nil || idx != r.last {
		var ok bool
		if w, ok = r.windows[idx]; !ok {
			if r.windows == nil || len(r.windows) >= maxWindows {
				r.windows = make(map[uint32]*window)
			}
			w = new(window)
			r.windows[idx] = w
		}
		r.last, r.lastW = idx, w
	}
	if w.seen(c) {
		r.count.Add(1)
	}
}
