package proxy

import (
	"time"

	"go.uber.org/zap"
)

// ingress forwards what the UDP socket gives until it fails (closed).
func (w *worker) ingress() error {
	for {
		n, err := w.conn.recv()
		if n > 0 {
			w.ingressBatch(n)
		}
		if err != nil {
			return err
		}
	}
}

// ingressBatch takes the n messages the socket received and delivers them.
func (w *worker) ingressBatch(n int) {
	for i := range n {
		w.isizes[i], w.isrc[i], w.isegs[i] = w.conn.size(i), w.conn.src(i), w.conn.segSize(i)
	}
	w.ingressProcess(n)
}

// ingressProcess checks the datagrams of the n messages in ibufs (sizes isizes,
// sources isrc; isegs > 0 when UDP GRO packed several datagrams of that size into
// one), coalesces TCP runs when the queue has offloads, and writes them to the TUN.
func (w *worker) ingressProcess(n int) {
	s := w.table.Load()
	c := w.cnt
	w.out = w.iout[:0]
	w.gi, w.arenaOff = 0, 0
	accepted, bytes := 0, 0
	w.runIdx = -1
	for i := range n {
		buf, size, step := w.ibufs[i], w.isizes[i], w.isegs[i]
		if size > len(buf)-Headroom { // cut short by the buffer (MSG_TRUNC)
			c.drops[oversized(s, w.isrc[i])].Add(1)
			continue
		}
		if step <= 0 || step >= size {
			step = size
		}
		for off := 0; off < size; off += step {
			pkt := buf[Headroom+off : Headroom+min(off+step, size)]
			if len(pkt) > w.maxDgram {
				c.drops[oversized(s, w.isrc[i])].Add(1)
				continue
			}
			if r := s.CheckIngress(pkt, w.isrc[i]); r != DropNone {
				c.drops[r].Add(1)
				continue
			}
			decTTL(pkt)
			accepted++
			bytes += len(pkt)
			// In place, the packet has the zeroed headroom in front; after the
			// first datagram of a message, it would be the previous one's tail.
			var inPlace []byte
			if off == 0 {
				inPlace = buf[:Headroom+len(pkt)]
			}
			w.ingressOne(pkt, inPlace)
		}
	}
	w.endRun()
	w.writeTUN(w.out)
	c.rxBatches.Add(1)
	c.rxHist[bucket(n)].Add(1)
	c.rxPackets.Add(uint64(accepted))
	c.rxBytes.Add(uint64(bytes))
}

// oversized is the reason to count for a datagram too large to take from src: as
// for every datagram, one from an address without a lease counts as that.
func oversized(s *Snapshot, src uint32) DropReason {
	if !s.HoldsLease(src) {
		return DropUnknownSource
	}
	return DropOversized
}

// ingressOne queues one checked packet for the TUN: into the current TCP run, as the
// start of a new one, or alone.
func (w *worker) ingressOne(pkt, inPlace []byte) {
	if !w.vnet {
		w.out = append(w.out, inPlace[:Headroom+len(pkt)])
		return
	}
	hl, udp, ok := groCandidate(pkt, w.uso)
	if w.runIdx >= 0 && ok && groJoins(&w.run, pkt, hl, udp) {
		if w.run.count == 1 {
			if w.gi == len(w.gro) { // every coalescing buffer is taken: write out first
				w.flushOut()
			}
			groAppend(&w.run, pkt, w.gro[w.gi])
			w.gi++
		} else {
			groAppend(&w.run, pkt, nil)
		}
		return
	}
	w.endRun()
	if ok {
		groStart(&w.run, pkt, hl, udp)
		w.runFirst = inPlace
		w.runIdx = 0
		return
	}
	w.out = append(w.out, w.single(pkt, inPlace))
}

// endRun queues the current run, if any.
func (w *worker) endRun() {
	if w.runIdx < 0 {
		return
	}
	w.runIdx = -1
	if w.run.count > 1 {
		w.out = append(w.out, groFinish(&w.run))
		return
	}
	w.out = append(w.out, w.single(w.run.first, w.runFirst))
}

// single returns a packet ready to write alone: in place when it has headroom, else
// copied into the arena behind a zeroed virtio-net header.
func (w *worker) single(pkt, inPlace []byte) []byte {
	if inPlace != nil {
		return inPlace
	}
	need := Headroom + len(pkt)
	if w.arenaOff+need > len(w.arena) {
		w.flushOut()
	}
	b := w.arena[w.arenaOff : w.arenaOff+need]
	w.arenaOff += need
	clear(b[:Headroom])
	copy(b[Headroom:], pkt)
	return b
}

// flushOut writes what is queued and frees the coalescing buffers and the arena. The
// current run, if it owns a coalescing buffer, is queued (and so ended) first.
func (w *worker) flushOut() {
	if w.runIdx >= 0 && w.run.count > 1 {
		w.endRun()
	}
	w.writeTUN(w.out)
	w.out = w.out[:0]
	w.gi, w.arenaOff = 0, 0
}

// writeTUN writes out to the TUN queue, counting writes and failures.
func (w *worker) writeTUN(out [][]byte) {
	if len(out) == 0 {
		return
	}
	written, err := w.tun.Write(out, Headroom)
	w.cnt.rxWrites.Add(uint64(written))
	if failed := len(out) - written; failed > 0 {
		w.cnt.drops[DropTUNError].Add(uint64(failed))
		if err != nil && w.ibkt.allow(time.Now().UnixNano()) {
			w.log.Debug("tun write failed", zap.Int("packets", failed), zap.Error(err))
		}
	}
}
