package proxy

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"time"

	"github.com/weftnet/weft/transport"
	"github.com/weftnet/weft/tun/offload"

	"go.uber.org/zap"
)

// egress forwards what the TUN queue gives until it fails (closed).
func (w *worker) egress() error {
	for {
		n, err := w.tun.Read(w.tx.bufs, w.tx.sizes, Headroom)
		if n > 0 {
			w.egressBatch(n)
		}
		if err != nil {
			return err
		}
	}
}

// egressBatch routes the n packets in tx.bufs and sends them, in as few sendmmsg calls
// as the send slots allow. TCP super packets (TUN offload) are cut into segments here.
func (w *worker) egressBatch(n int) {
	s := w.table.Load()
	for i := range n {
		pkt := w.tx.bufs[i][Headroom : Headroom+w.tx.sizes[i]]
		var vh offload.VnetHdr
		if w.vnet {
			vh = offload.ParseVnetHdr(w.tx.bufs[i][Headroom-offload.VnetHdrLen : Headroom])
			if vh.GSOType == offload.GSONone && vh.Flags&offload.NeedsCsum != 0 && !offload.FinishChecksum(pkt, vh) {
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
		u := w.conn
		if p.under6 {
			if u = w.conn6; u == nil { // no IPv6 underlay socket
				w.cnt.drops[DropSendError].Add(1)
				continue
			}
		}
		to := netip.AddrPortFrom(p.PublicIP, w.port)
		if vh.GSOType == offload.GSONone {
			if !u.Room(1) {
				w.flush()
			}
			if err := u.StageRun(pkt, to); err != nil {
				// Not of u's family: cannot happen (u is picked by p.under6), but a
				// refused packet is counted, never sent half-staged.
				w.cnt.drops[DropSendError].Add(1)
				continue
			}
			w.tx.pendingDgrams++
			w.tx.pending += len(pkt)
			continue
		}
		ok := false
		switch vh.GSOType &^ offload.GSOECN {
		case offload.GSOTCPv4, offload.GSOTCPv6:
			ok = w.stageTSO(u, pkt, to, int(vh.GSOSize))
		case offload.GSOUDPL4:
			ok = w.stageUSO(u, pkt, to, int(vh.GSOSize))
		}
		if !ok {
			w.cnt.drops[DropMalformed].Add(1)
		}
	}
	w.flush()
	w.cnt.txBatches.Add(1)
	w.cnt.txHist[bucket(n)].Add(1)
}

// stageTSO cuts a TCP super packet (IPv4 or IPv6) into segments of gsoSize payload bytes, each a
// datagram of its own headers (in seghdr) and a slice of pkt's payload. With UDP GSO
// a run of them goes in one message and the kernel cuts the datagrams apart.
func (w *worker) stageTSO(u *transport.Conn, pkt []byte, to netip.AddrPort, gsoSize int) bool {
	ihl, hl, ok := offload.TSOLayout(pkt)
	return ok && w.stageSegments(u, pkt, to, gsoSize, ihl, hl, false)
}

// stageUSO cuts a UDPv4 super packet (TUN USO: an application sent many datagrams
// at once with UDP_SEGMENT) into its datagrams of gsoSize payload bytes, each one
// UDP datagram on the wire as flannel sends it; with UDP GSO a run of them goes in
// one message.
func (w *worker) stageUSO(u *transport.Conn, pkt []byte, to netip.AddrPort, gsoSize int) bool {
	ihl, hl, ok := offload.USOLayout(pkt)
	return ok && w.stageSegments(u, pkt, to, gsoSize, ihl, hl, true)
}

// stageSegments stages pkt's payload after its hl bytes of IPv4 (ihl) and TCP or UDP
// headers as segments of gsoSize bytes, each behind headers of its own written by
// offload.UDPSegmentHeaders (udp) or offload.TCPSegmentHeaders (TCP).
func (w *worker) stageSegments(u *transport.Conn, pkt []byte, to netip.AddrPort, gsoSize, ihl, hl int, udp bool) bool {
	payload := pkt[hl:]
	if gsoSize == 0 || len(payload) == 0 {
		return false
	}
	segLen := hl + gsoSize
	per := 1
	if u.GSO() {
		per = max(1, min(transport.MaxSegments, transport.MaxUDPPayload/segLen))
	}
	nsegs := (len(payload) + gsoSize - 1) / gsoSize
	for i := 0; i < nsegs; {
		k := min(per, nsegs-i)
		if !u.Room(2*k) || w.tx.nhdr+k > len(w.tx.seghdr) {
			w.flush()
		}
		if err := u.Begin(to); err != nil {
			// Not of u's family (cannot happen, as above): the rest is dropped,
			// counted once, and nothing is added to a message not begun.
			w.cnt.drops[DropSendError].Add(1)
			return true
		}
		for range k {
			off := i * gsoSize
			seg := payload[off:min(off+gsoSize, len(payload))]
			h := w.tx.seghdr[w.tx.nhdr][:hl]
			w.tx.nhdr++
			if udp {
				offload.UDPSegmentHeaders(h, pkt, ihl, hl, i, seg)
			} else {
				offload.TCPSegmentHeaders(h, pkt, ihl, hl, i, off, seg, i == nsegs-1)
			}
			u.AddIov(h)
			u.AddIov(seg)
			w.tx.pending += hl + len(seg)
			i++
		}
		u.End(k, segLen)
		w.tx.pendingDgrams += k
	}
	return true
}

// flush sends the staged messages.
func (w *worker) flush() {
	if w.tx.pendingDgrams == 0 {
		return
	}
	c := w.cnt
	gso := w.conn.GSO()
	failed, err := w.conn.Send()
	if gso && !w.conn.GSO() {
		w.log.Warn("UDP GSO switched off", zap.Error(err))
	}
	if w.conn6 != nil && w.conn6.Staged() > 0 {
		f6, err6 := w.conn6.Send()
		failed += f6
		err = errors.Join(err, err6)
	}
	if failed > 0 {
		c.drops[DropSendError].Add(uint64(failed))
		if w.tx.logLimit.allow(time.Now().UnixNano()) {
			w.log.Debug("udp send failed", zap.Int("packets", failed), zap.Error(err))
		}
	}
	c.txPackets.Add(uint64(w.tx.pendingDgrams - failed))
	c.txBytes.Add(uint64(w.tx.pending)) // bytes handed to the kernel
	w.tx.nhdr, w.tx.pending, w.tx.pendingDgrams = 0, 0, 0
}

// unreachable answers pkt with ICMP net unreachable (ICMPv6 no route for IPv6)
// through the TUN, rate limited.
func (w *worker) unreachable(pkt []byte, s *Snapshot) {
	v6 := pkt[0]>>4 == 6
	if v6 && (s.v6 == nil || !wantsICMPv6Error(pkt)) || !v6 && !wantsICMPError(pkt) || !w.tx.icmpLimit.allow(time.Now().UnixNano()) {
		return
	}
	// The error comes from the unreachable subnet's first address (where its host's
	// flannel0 would be): our own address as source would be dropped as martian.
	var n int
	if v6 {
		from := s.v6.subnetStart(binary.BigEndian.Uint64(pkt[24:32]), binary.BigEndian.Uint64(pkt[32:40]))
		n = buildUnreachable6(w.tx.icmp[0][Headroom:], pkt, from)
	} else {
		n = buildUnreachable(w.tx.icmp[0][Headroom:], pkt, binary.BigEndian.Uint32(pkt[16:20])&s.subMask, 0)
	}
	out := w.tx.icmp[0][:Headroom+n]
	w.tx.icmp[0] = out
	if _, err := w.tun.Write(w.tx.icmp[:], Headroom); err == nil {
		w.cnt.icmpSent.Add(1)
	}
	w.tx.icmp[0] = out[:cap(out)]
}
