package proxy

import (
	"math/bits"
	"sync/atomic"
)

// DropReason says why a packet was dropped.
type DropReason uint8

const (
	DropNone DropReason = iota
	// DropMalformed: neither IPv4 nor IPv6 (IPv6 without an IPv6 network: ingress), or
	// (egress) not IPv4 or IPv6, IHL < 5, header longer than the packet, or an offload
	// header that does not fit the packet.
	DropMalformed
	// DropUnknownSource: a datagram from an address that holds no lease.
	DropUnknownSource
	// DropSpoofedSource: the inner source is not in a subnet of the sender.
	DropSpoofedSource
	// DropNotLocal: the inner destination is not in our subnet.
	DropNotLocal
	// DropTTL: TTL <= 1.
	DropTTL
	// DropNoRoute: egress to a subnet of the network that has no lease (ICMP net
	// unreachable is sent back, rate limited).
	DropNoRoute
	// DropNotOverlay: egress to an address outside the network or in our own subnet.
	DropNotOverlay
	// DropSendError: the UDP send failed (or the peer is on the IPv6 underlay and
	// there is no IPv6 socket).
	DropSendError
	// DropTUNError: a write to the TUN device failed (a coalesced run counts once).
	DropTUNError
	// DropTruncated (ingress): shorter than an IPv4 (IPv6) header or than its total
	// (payload) length. IPv6 packets count the same reasons as IPv4 ones: bad_length
	// for bytes after the payload length, ttl for the hop limit.
	DropTruncated
	// DropBadHeaderLen (ingress): IHL below 5 or beyond the total length.
	DropBadHeaderLen
	// DropBadLength (ingress): bytes after the total length (a peer's TUN read gives
	// whole packets, so trailing bytes mean a broken or forged datagram).
	DropBadLength
	// DropBadChecksum (ingress): the IPv4 header checksum does not verify.
	DropBadChecksum
	// DropOversized (ingress): a datagram larger than the largest packet accepted
	// from a peer (the TUN MTU, at least 9216 bytes for peers on jumbo frames).
	DropOversized
	// DropNotUnicast (ingress): an inner multicast or broadcast destination (limited,
	// or our subnet's broadcast address), or the sender subnet's broadcast address
	// as source. The overlay carries unicast only, as flannel's does.
	DropNotUnicast
	numDropReasons
)

var dropNames = [numDropReasons]string{
	"none", "malformed", "unknown_source", "spoofed_source", "not_local", "ttl",
	"no_route", "not_overlay", "send_error", "tun_error", "truncated",
	"bad_header_len", "bad_length", "bad_checksum", "oversized", "not_unicast",
}

// DropReasons lists every reason a packet can be dropped for (DropNone excluded).
func DropReasons() []DropReason {
	out := make([]DropReason, 0, numDropReasons-1)
	for r := DropReason(1); r < numDropReasons; r++ {
		out = append(out, r)
	}
	return out
}

func (r DropReason) String() string {
	if r < numDropReasons {
		return dropNames[r]
	}
	return "unknown"
}

// histBuckets is the number of batch size buckets: [1], [2,3], [4,7], ... [64,127], [128,∞).
const histBuckets = 8

// Stats is a snapshot of the data path's counters (summed over workers).
type Stats struct {
	TxPackets uint64 `json:"tx_packets"` // sent to peers
	TxBytes   uint64 `json:"tx_bytes"`
	TxBatches uint64 `json:"tx_batches"` // TUN reads that returned packets
	RxPackets uint64 `json:"rx_packets"` // datagrams accepted for the TUN device
	RxBytes   uint64 `json:"rx_bytes"`
	RxBatches uint64 `json:"rx_batches"` // recvmmsg calls that returned datagrams
	RxWrites  uint64 `json:"rx_writes"`  // TUN writes (a coalesced TCP run is one)
	ICMPSent  uint64 `json:"icmp_sent"`
	// PollSleeps counts how often a busy-polling worker went idle and slept in
	// poll(2) (Config.BusyPoll).
	PollSleeps uint64 `json:"poll_sleeps"`
	// Drops counts dropped packets by reason (DropReason.String).
	Drops map[string]uint64 `json:"drops"`
	// TxBatchSizes and RxBatchSizes are histograms of batch sizes; bucket i counts
	// batches of [2^i, 2^(i+1)) packets, the last one everything larger.
	TxBatchSizes [histBuckets]uint64 `json:"tx_batch_sizes"`
	RxBatchSizes [histBuckets]uint64 `json:"rx_batch_sizes"`
}

// Dropped returns the count for one reason.
func (s Stats) Dropped(r DropReason) uint64 { return s.Drops[r.String()] }

// counters are one worker's; each field is written by one goroutine, read by Stats.
type counters struct {
	txPackets, txBytes, txBatches atomic.Uint64
	rxPackets, rxBytes, rxBatches atomic.Uint64
	rxWrites                      atomic.Uint64
	icmpSent                      atomic.Uint64
	pollSleeps                    atomic.Uint64
	drops                         [numDropReasons]atomic.Uint64
	txHist, rxHist                [histBuckets]atomic.Uint64
	_                             [64]byte // keep workers' counters off each other's cache lines
}

func bucket(n int) int { return min(bits.Len(uint(n))-1, histBuckets-1) }

func (c *counters) addTo(s *Stats) {
	s.TxPackets += c.txPackets.Load()
	s.TxBytes += c.txBytes.Load()
	s.TxBatches += c.txBatches.Load()
	s.RxPackets += c.rxPackets.Load()
	s.RxBytes += c.rxBytes.Load()
	s.RxBatches += c.rxBatches.Load()
	s.RxWrites += c.rxWrites.Load()
	s.ICMPSent += c.icmpSent.Load()
	s.PollSleeps += c.pollSleeps.Load()
	for r := DropReason(1); r < numDropReasons; r++ {
		s.Drops[r.String()] += c.drops[r].Load()
	}
	for i := range histBuckets {
		s.TxBatchSizes[i] += c.txHist[i].Load()
		s.RxBatchSizes[i] += c.rxHist[i].Load()
	}
}
