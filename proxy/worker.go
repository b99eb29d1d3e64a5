package proxy

import (
	"encoding/binary"
	"time"

	"go.uber.org/zap"
)

// TUN is one queue of the TUN device, as tun.Queue implements it. Write must be safe
// against one concurrent Write (ICMP errors are written from the egress side).
type TUN interface {
	Read(bufs [][]byte, sizes []int, offset int) (int, error)
	Write(bufs [][]byte, offset int) (int, error)
}

// icmpBufLen holds an ICMP error quoting a maximal IPv4 header.
const icmpBufLen = ipv4HeaderLen + 8 + 60 + icmpQuoteLen

// worker moves packets between one TUN queue and one UDP socket.
type worker struct {
	tun   TUN
	conn  *udpConn
	table *Table
	cnt   *counters
	log   *zap.Logger

	// egress (TUN -> UDP), owned by the egress goroutine
	ebufs  [][]byte
	esizes []int
	icmp   [1][]byte
	ebkt   tokenBucket // ICMP errors
	elog   tokenBucket // log lines of the egress side

	// ingress (UDP -> TUN), owned by the ingress goroutine
	ibufs [][]byte
	iout  [][]byte
	ibkt  tokenBucket // log lines of the ingress side
}

func newWorker(tun TUN, table *Table, batch, egressLen, ingressLen int, cnt *counters, log *zap.Logger) *worker {
	w := &worker{
		tun: tun, table: table, cnt: cnt, log: log,
		ebufs: make([][]byte, batch), esizes: make([]int, batch),
		ibufs: make([][]byte, batch), iout: make([][]byte, 0, batch),
		ebkt: tokenBucket{burst: 10, every: int64(10 * time.Millisecond)},
		elog: tokenBucket{burst: 1, every: int64(time.Second)},
		ibkt: tokenBucket{burst: 1, every: int64(time.Second)},
	}
	for i := range w.ebufs {
		w.ebufs[i] = make([]byte, Headroom+egressLen)
		w.ibufs[i] = make([]byte, Headroom+ingressLen)
	}
	w.icmp[0] = make([]byte, Headroom+icmpBufLen)
	return w
}

// egress forwards what the TUN queue gives until it fails (closed).
func (w *worker) egress() error {
	for {
		n, err := w.tun.Read(w.ebufs, w.esizes, Headroom)
		if n > 0 {
			w.egressBatch(n)
		}
		if err != nil {
			return err
		}
	}
}

// egressBatch routes the n packets in ebufs and sends them in one batch.
func (w *worker) egressBatch(n int) {
	s := w.table.Load()
	k, bytes := 0, 0
	for i := range n {
		pkt := w.ebufs[i][Headroom : Headroom+w.esizes[i]]
		p, r := s.RouteEgress(pkt)
		if r != DropNone {
			w.cnt.drops[r].Add(1)
			if r == DropNoRoute {
				w.unreachable(pkt, s)
			}
			continue
		}
		w.conn.stage(k, pkt, p.ip)
		k++
		bytes += len(pkt)
	}
	c := w.cnt
	c.txBatches.Add(1)
	c.txHist[bucket(n)].Add(1)
	if k == 0 {
		return
	}
	failed, err := w.conn.send(k)
	if failed > 0 {
		c.drops[DropSendError].Add(uint64(failed))
		if w.elog.allow(time.Now().UnixNano()) {
			w.log.Debug("udp send failed", zap.Int("packets", failed), zap.Error(err))
		}
	}
	c.txPackets.Add(uint64(k - failed))
	c.txBytes.Add(uint64(bytes)) // bytes of the packets handed to the kernel
}

// unreachable answers pkt with ICMP net unreachable through the TUN, rate limited.
func (w *worker) unreachable(pkt []byte, s *Snapshot) {
	if !wantsICMPError(pkt) || !w.ebkt.allow(time.Now().UnixNano()) {
		return
	}
	// The error comes from the unreachable subnet's first address (where its host's
	// flannel0 would be): our own address as source would be dropped as martian.
	from := binary.BigEndian.Uint32(pkt[16:20]) & s.subMask
	n := buildUnreachable(w.icmp[0][Headroom:], pkt, from, 0)
	out := w.icmp[0][:Headroom+n]
	w.icmp[0] = out
	if _, err := w.tun.Write(w.icmp[:], Headroom); err == nil {
		w.cnt.icmpSent.Add(1)
	}
	w.icmp[0] = out[:cap(out)]
}

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

// ingressBatch checks the n datagrams in ibufs and writes the good ones to the TUN.
func (w *worker) ingressBatch(n int) {
	s := w.table.Load()
	c := w.cnt
	out := w.iout[:0]
	bytes := 0
	for i := range n {
		size := w.conn.size(i)
		pkt := w.ibufs[i][Headroom : Headroom+size]
		if r := s.CheckIngress(pkt, w.conn.src(i)); r != DropNone {
			c.drops[r].Add(1)
			continue
		}
		decTTL(pkt)
		out = append(out, w.ibufs[i][:Headroom+size])
		bytes += size
	}
	c.rxBatches.Add(1)
	c.rxHist[bucket(n)].Add(1)
	if len(out) == 0 {
		return
	}
	written, err := w.tun.Write(out, Headroom)
	if failed := len(out) - written; failed > 0 {
		c.drops[DropTUNError].Add(uint64(failed))
		if err != nil && w.ibkt.allow(time.Now().UnixNano()) {
			w.log.Debug("tun write failed", zap.Int("packets", failed), zap.Error(err))
		}
	}
	c.rxPackets.Add(uint64(written))
	c.rxBytes.Add(uint64(bytes))
}

// tokenBucket limits ICMP errors and log lines: burst tokens, one more every ns.
type tokenBucket struct {
	burst  int64
	every  int64
	tokens int64
	last   int64
}

func (b *tokenBucket) allow(now int64) bool {
	if b.last == 0 {
		b.last, b.tokens = now, b.burst
	}
	if add := (now - b.last) / b.every; add > 0 {
		b.tokens = min(b.burst, b.tokens+add)
		b.last += add * b.every
	}
	if b.tokens <= 0 {
		return false
	}
	b.tokens--
	return true
}
