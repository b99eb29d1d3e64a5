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
	vnet    bool // the queue has TUN offloads: virtio-net headers, super packets
	ebufs   [][]byte
	esizes  []int
	seghdr  [][]byte // segment headers (offload)
	nhdr    int      // seghdr in use
	pending int      // bytes staged
	// datagrams staged
	pendingDgrams int
	slots         int // send messages; twice as many iovecs
	icmp          [1][]byte
	ebkt          tokenBucket // ICMP errors
	elog          tokenBucket // log lines of the egress side

	// ingress (UDP -> TUN), owned by the ingress goroutine
	ibufs  [][]byte
	isizes []int
	isrc   []uint32
	iout   [][]byte
	isegs  []int
	udpGRO bool     // receive buffers sized for UDP GRO
	gro    [][]byte // coalescing buffers (offload only)
	arena  []byte   // copies of lone packets that lack headroom (UDP GRO)
	// per batch state of ingressProcess
	out      [][]byte
	gi       int // coalescing buffers in use
	arenaOff int
	run      groRun
	runIdx   int         // >= 0 while a run is open
	runFirst []byte      // the run's first packet in place, or nil
	ibkt     tokenBucket // log lines of the ingress side
}

// newWorker allocates a worker's buffers. With TUN offloads and udpGRO, receive
// buffers are large enough for a UDP GRO message.
func newWorker(tun TUN, table *Table, batch, egressLen, ingressLen int, udpGRO bool, cnt *counters, log *zap.Logger) *worker {
	w := &worker{
		tun: tun, table: table, cnt: cnt, log: log,
		ebkt: tokenBucket{burst: 10, every: int64(10 * time.Millisecond)},
		elog: tokenBucket{burst: 1, every: int64(time.Second)},
		ibkt: tokenBucket{burst: 1, every: int64(time.Second)},
	}
	reads, slots := batch, batch
	if v, ok := tun.(interface{ VnetHdr() bool }); ok && v.VnetHdr() {
		// Reads bring up to 64 KiB each, cut into many segments.
		w.vnet = true
		egressLen = maxSuperPacket
		reads, slots = min(batch, offloadReads), batch*offloadSlotsPerRead
	}
	recvs := batch
	if w.vnet && udpGRO {
		w.udpGRO = true
		ingressLen = maxSuperPacket
		recvs = min(batch, groRecvs)
	}
	w.ibufs, w.isizes, w.isrc, w.isegs = make([][]byte, recvs), make([]int, recvs), make([]uint32, recvs), make([]int, recvs)
	w.iout = make([][]byte, 0, recvs)
	if w.udpGRO {
		w.iout = make([][]byte, 0, recvs*groMaxDatagrams)
	}
	w.ebufs, w.esizes = make([][]byte, reads), make([]int, reads)
	for i := range w.ebufs {
		w.ebufs[i] = make([]byte, Headroom+egressLen)
	}
	w.slots = slots
	if w.vnet {
		w.seghdr = make([][]byte, slots)
		for i := range w.seghdr {
			w.seghdr[i] = make([]byte, maxSegHeaders)
		}
	}
	for i := range w.ibufs {
		w.ibufs[i] = make([]byte, Headroom+ingressLen)
	}
	if w.vnet {
		w.gro = [][]byte{make([]byte, Headroom+groMaxLen), make([]byte, Headroom+groMaxLen)}
		w.arena = make([]byte, Headroom+groMaxLen)
	}
	w.icmp[0] = make([]byte, Headroom+icmpBufLen)
	return w
}

// With TUN offloads a worker reads at most offloadReads super packets per batch and
// has offloadSlotsPerRead send slots per packet of Config.Batch.
const (
	offloadReads        = 16
	offloadSlotsPerRead = 4
)

// With UDP GRO a worker receives into groRecvs buffers of 64 KiB, each holding up to
// groMaxDatagrams datagrams.
const (
	groRecvs        = 32
	groMaxDatagrams = 64
)

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

// egressBatch routes the n packets in ebufs and sends them, in as few sendmmsg calls
// as the send slots allow. TCP super packets (TUN offload) are cut into segments here.
func (w *worker) egressBatch(n int) {
	s := w.table.Load()
	for i := range n {
		pkt := w.ebufs[i][Headroom : Headroom+w.esizes[i]]
		var vh vnetHdr
		if w.vnet {
			vh = parseVnetHdr(w.ebufs[i][Headroom-vnetHdrLen : Headroom])
			if vh.gsoType == vnetGSONone && vh.flags&vnetNeedsCsum != 0 && !finishChecksum(pkt, vh) {
				w.cnt.drops[DropMalformed].Add(1)
				continue
			}
		}
		p, r := s.RouteEgress(pkt)
		if r != DropNone {
			w.cnt.drops[r].Add(1)
			if r == DropNoRoute {
				w.unreachable(pkt, s)
			}
			continue
		}
		if vh.gsoType == vnetGSONone {
			if !w.conn.room(1) {
				w.flush()
			}
			w.conn.stage(pkt, p.ip)
			w.pendingDgrams++
			w.pending += len(pkt)
			continue
		}
		if vh.gsoType&^vnetGSOECN != vnetGSOTCPv4 || !w.stageTSO(pkt, p, int(vh.gsoSize)) {
			w.cnt.drops[DropMalformed].Add(1)
		}
	}
	w.flush()
	w.cnt.txBatches.Add(1)
	w.cnt.txHist[bucket(n)].Add(1)
}

// stageTSO cuts a TCPv4 super packet into segments of gsoSize payload bytes, each a
// datagram of its own headers (in seghdr) and a slice of pkt's payload. With UDP GSO
// a run of them goes in one message and the kernel cuts the datagrams apart.
func (w *worker) stageTSO(pkt []byte, p *Peer, gsoSize int) bool {
	ihl, hl, ok := tsoLayout(pkt)
	payload := pkt[hl:]
	if !ok || gsoSize == 0 || len(payload) == 0 {
		return false
	}
	segLen := hl + gsoSize
	per := 1
	if w.conn.gso {
		per = max(1, min(udpMaxSegments, maxUDPPayload/segLen))
	}
	nsegs := (len(payload) + gsoSize - 1) / gsoSize
	for i := 0; i < nsegs; {
		k := min(per, nsegs-i)
		if !w.conn.room(2*k) || w.nhdr+k > len(w.seghdr) {
			w.flush()
		}
		w.conn.begin(p.ip)
		for range k {
			off := i * gsoSize
			seg := payload[off:min(off+gsoSize, len(payload))]
			h := w.seghdr[w.nhdr][:hl]
			w.nhdr++
			segmentHeaders(h, pkt, ihl, hl, i, off, seg, i == nsegs-1)
			w.conn.addIov(h)
			w.conn.addIov(seg)
			w.pending += hl + len(seg)
			i++
		}
		w.conn.end(k, segLen)
		w.pendingDgrams += k
	}
	return true
}

// UDP GSO limits: segments per send (UDP_MAX_SEGMENTS on older kernels) and the
// largest UDP payload.
const (
	udpMaxSegments = 64
	maxUDPPayload  = 65535 - 20 - 8
)

// flush sends the staged messages.
func (w *worker) flush() {
	if w.pendingDgrams == 0 {
		return
	}
	c := w.cnt
	gso := w.conn.gso
	failed, err := w.conn.send()
	if gso && !w.conn.gso {
		w.log.Warn("UDP GSO switched off", zap.Error(err))
	}
	if failed > 0 {
		c.drops[DropSendError].Add(uint64(failed))
		if w.elog.allow(time.Now().UnixNano()) {
			w.log.Debug("udp send failed", zap.Int("packets", failed), zap.Error(err))
		}
	}
	c.txPackets.Add(uint64(w.pendingDgrams - failed))
	c.txBytes.Add(uint64(w.pending)) // bytes handed to the kernel
	w.nhdr, w.pending, w.pendingDgrams = 0, 0, 0
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
		if step <= 0 || step >= size {
			step = size
		}
		for off := 0; off < size; off += step {
			pkt := buf[Headroom+off : Headroom+min(off+step, size)]
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

// ingressOne queues one checked packet for the TUN: into the current TCP run, as the
// start of a new one, or alone.
func (w *worker) ingressOne(pkt, inPlace []byte) {
	if !w.vnet {
		w.out = append(w.out, inPlace[:Headroom+len(pkt)])
		return
	}
	hl, ok := groCandidate(pkt)
	if w.runIdx >= 0 && ok && groJoins(&w.run, pkt, hl) {
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
		groStart(&w.run, pkt, hl)
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
