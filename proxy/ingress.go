package proxy

import (
	"time"

	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/tun/offload"

	"go.uber.org/zap"
)

// ingress forwards what the UDP socket gives until it fails (closed).
func (w *worker) ingress() error {
	for {
		n, err := w.conn.Recv()
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
		w.rx.sizes[i], w.rx.segs[i] = w.conn.Size(i), w.conn.SegSize(i)
		if from := w.conn.From(i).Addr(); w.under6 {
			w.rx.src6[i] = from.As16()
		} else {
			w.rx.src[i] = ipconv.U32(from)
		}
	}
	w.ingressProcess(n)
}

// ingressProcess checks the datagrams of the n messages in rx.bufs (sizes rx.sizes,
// sources rx.src; rx.segs > 0 when UDP GRO packed several datagrams of that size into
// one), coalesces TCP runs when the queue has offloads, and writes them to the TUN.
// Packets are queued as pieces of the receive buffers; nothing is copied.
func (w *worker) ingressProcess(n int) {
	s := w.table.Load()
	c := w.cnt
	w.resetOut()
	accepted, bytes := 0, 0
	w.rx.inRun = false
	for i := range n {
		buf, size, step := w.rx.bufs[i], w.rx.sizes[i], w.rx.segs[i]
		if size > len(buf)-Headroom { // cut short by the buffer (MSG_TRUNC)
			c.drops[w.oversized(s, i)].Add(1)
			continue
		}
		if step <= 0 || step >= size {
			step = size
		}
		for off := 0; off < size; off += step {
			pkt := buf[Headroom+off : Headroom+min(off+step, size)]
			if len(pkt) > w.rx.maxDgram {
				c.drops[w.oversized(s, i)].Add(1)
				continue
			}
			var r DropReason
			if w.under6 {
				r = s.CheckIngressFrom6(pkt, w.rx.src6[i])
			} else {
				r = s.CheckIngress(pkt, w.rx.src[i])
			}
			if r != DropNone {
				c.drops[r].Add(1)
				continue
			}
			decHop(pkt)
			accepted++
			bytes += len(pkt)
			w.ingressOne(pkt)
		}
	}
	w.endRun()
	w.writeTUN(w.rx.out)
	c.rxBatches.Add(1)
	c.rxHist[bucket(n)].Add(1)
	c.rxPackets.Add(uint64(accepted))
	c.rxBytes.Add(uint64(bytes))
}

// oversized is the reason to count for a datagram too large to take from the source
// of message i: as for every datagram, one from an address without a lease counts
// as that.
func (w *worker) oversized(s *Snapshot, i int) DropReason {
	if w.under6 && !s.HoldsLease6(w.rx.src6[i]) || !w.under6 && !s.HoldsLease(w.rx.src[i]) {
		return DropUnknownSource
	}
	return DropOversized
}

// ingressOne queues one checked packet for the TUN: into the current TCP or UDP run
// (offload.Run), as the start of a new one, or alone.
func (w *worker) ingressOne(pkt []byte) {
	if !w.vnet {
		w.single(pkt)
		return
	}
	hl, udp, ok := offload.Coalescable(pkt, w.uso)
	if w.rx.inRun && ok && w.rx.run.Joins(pkt, hl, udp) {
		if w.rx.run.Count() == 1 {
			// The run becomes a packet of the batch: its headers, then the payloads.
			if w.rx.nrunHdr == len(w.rx.runHdrs) || w.rx.npieces+3 > len(w.rx.pieces) {
				w.flushOut() // the run's first packet is not queued yet: it stays open
			}
			h := w.rx.runHdrs[w.rx.nrunHdr][:offload.VnetHdrLen+hl]
			w.rx.nrunHdr++
			w.rx.run.Append(pkt, h)
			w.rx.runOut, w.rx.runStart = len(w.rx.out), w.rx.npieces
			w.rx.out = append(w.rx.out, w.addPieces(h, w.rx.run.First()[hl:], pkt[hl:]))
			return
		}
		if w.rx.npieces < len(w.rx.pieces) {
			w.rx.run.Append(pkt, nil)
			w.rx.pieces[w.rx.npieces] = pkt[hl:]
			w.rx.npieces++
			w.rx.out[w.rx.runOut] = w.rx.pieces[w.rx.runStart:w.rx.npieces]
			return
		}
	}
	w.endRun()
	if ok {
		w.rx.run.Start(pkt, hl, udp)
		w.rx.inRun = true
		return
	}
	w.single(pkt)
}

// endRun queues the current run, if any: its headers are written, or its lone packet
// is queued as such.
func (w *worker) endRun() {
	if !w.rx.inRun {
		return
	}
	w.rx.inRun = false
	if w.rx.run.Count() > 1 {
		w.rx.run.Finish()
		return
	}
	w.single(w.rx.run.First())
}

// single queues pkt as a packet of its own (behind a zero virtio-net header on a
// queue with offloads).
func (w *worker) single(pkt []byte) {
	if w.rx.npieces+2 > len(w.rx.pieces) {
		w.flushOut()
	}
	if w.vnet {
		w.rx.out = append(w.rx.out, w.addPieces(zeroVnetHdr[:], pkt))
		return
	}
	w.rx.out = append(w.rx.out, w.addPieces(pkt))
}

// zeroVnetHdr is the virtio-net header of a packet without offloads.
var zeroVnetHdr [offload.VnetHdrLen]byte

// addPieces appends ps to the batch's pieces and returns them as one packet. The
// caller has checked there is room.
func (w *worker) addPieces(ps ...[]byte) [][]byte {
	start := w.rx.npieces
	w.rx.npieces += copy(w.rx.pieces[start:], ps)
	return w.rx.pieces[start:w.rx.npieces]
}

// resetOut empties the batch's queue of packets, pieces and run headers.
func (w *worker) resetOut() {
	clear(w.rx.pieces[:w.rx.npieces]) // drop the references to the receive buffers
	w.rx.out, w.rx.npieces, w.rx.nrunHdr = w.rx.outBuf[:0], 0, 0
}

// flushOut writes what is queued and empties the queue. The current run, if it is
// queued (two packets or more), is ended first.
func (w *worker) flushOut() {
	if w.rx.inRun && w.rx.run.Count() > 1 {
		w.endRun()
	}
	w.writeTUN(w.rx.out)
	w.resetOut()
}

// writeTUN writes out to the TUN queue, counting writes and failures: gathered by
// the queue when it can (writev), else each packet joined into one buffer first.
func (w *worker) writeTUN(out [][][]byte) {
	if len(out) == 0 {
		return
	}
	var written int
	var err error
	if w.rx.gather != nil {
		written, err = w.rx.gather.WriteGather(out)
	} else {
		written, err = w.joinWrite(out)
	}
	w.cnt.rxWrites.Add(uint64(written))
	if failed := len(out) - written; failed > 0 {
		w.cnt.drops[DropTUNError].Add(uint64(failed))
		if err != nil && w.rx.logLimit.allow(time.Now().UnixNano()) {
			w.log.Debug("tun write failed", zap.Int("packets", failed), zap.Error(err))
		}
	}
}

// joinWrite writes each packet of out with Write, its pieces copied into one buffer
// (for queues without WriteGather).
func (w *worker) joinWrite(out [][][]byte) (int, error) {
	off := Headroom
	if w.vnet {
		off -= offload.VnetHdrLen // the first piece is the virtio-net header
	}
	written := 0
	var first error
	for _, ps := range out {
		n := off
		for _, p := range ps {
			n += copy(w.rx.join[n:], p)
		}
		w.rx.joinBuf[0] = w.rx.join[:n]
		k, err := w.tun.Write(w.rx.joinBuf[:], Headroom)
		written += k
		if err != nil && first == nil {
			first = err
		}
	}
	return written, first
}
