package wgbind

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
)

func TestWindow(t *testing.T) {
	for _, c := range []struct {
		name     string
		counters []uint64
		want     []bool // seen (a replay) for each
	}{
		{"in order", []uint64{0, 1, 2, 3}, []bool{false, false, false, false}},
		{"again", []uint64{0, 1, 1, 0}, []bool{false, false, true, true}},
		{"out of order within the window", []uint64{10, 5, 9, 5}, []bool{false, false, false, true}},
		{"too old", []uint64{windowBits + 100, 99, 100}, []bool{false, true, false}},
		{"far jump clears the ring", []uint64{3, 1 << 40, 3, 1<<40 - 1, 1 << 40}, []bool{false, false, true, false, true}},
		{"block boundary", []uint64{63, 64, 127, 128, 64}, []bool{false, false, false, false, true}},
		{"a whole ring ahead", []uint64{5, 5 + ringBlocks*blockBits, 5 + ringBlocks*blockBits - 1}, []bool{false, false, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var w window
			for i, ctr := range c.counters {
				if got := w.seen(ctr); got != c.want[i] {
					t.Fatalf("counter %d (#%d): seen %v, want %v", ctr, i, got, c.want[i])
				}
			}
		})
	}
}

func transportMsg(idx uint32, ctr uint64) []byte {
	p := make([]byte, transportMinLen)
	binary.LittleEndian.PutUint32(p, msgTransport)
	binary.LittleEndian.PutUint32(p[4:], idx)
	binary.LittleEndian.PutUint64(p[8:], ctr)
	return p
}

// TestReplaysCount: replays are counted per receiver index; other messages and
// short ones are not looked at.
func TestReplaysCount(t *testing.T) {
	var n atomic.Uint64
	r := replays{count: &n}
	for _, p := range [][]byte{
		transportMsg(1, 0), transportMsg(1, 1), transportMsg(2, 0), // index 2 has its own window
		transportMsg(1, 1),            // a replay
		transportMsg(2, 0),            // a replay
		{1, 0, 0, 0, 9, 9, 9, 9},      // an initiation-type message, short: not looked at
		transportMsg(1, 0)[:20],       // too short for a transport message
		append(transportMsg(3, 7), 1), // longer is fine
		append(transportMsg(3, 7), 2), // same counter: a replay
	} {
		r.check(p)
	}
	if n.Load() != 3 {
		t.Fatalf("%d replays counted, want 3", n.Load())
	}
}

// TestReplaysBounded: made-up receiver indexes do not grow the windows without end.
func TestReplaysBounded(t *testing.T) {
	var n atomic.Uint64
	r := replays{count: &n}
	for i := range uint32(3 * maxWindows) {
		r.check(transportMsg(i, 0))
	}
	if len(r.windows) > maxWindows || n.Load() != 0 {
		t.Fatalf("%d windows, %d counted", len(r.windows), n.Load())
	}
}

func FuzzReplays(f *testing.F) {
	f.Add(transportMsg(1, 5), transportMsg(1, 5))
	f.Add([]byte{4, 0, 0, 0}, []byte{})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var n atomic.Uint64
		r := replays{count: &n}
		r.check(a)
		r.check(b)
		if n.Load() > 1 {
			t.Fatalf("%d replays counted of two messages", n.Load())
		}
	})
}
