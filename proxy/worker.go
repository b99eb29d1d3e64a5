package proxy

import (
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
	tun  TUN
	conn *udpConn
	// conn6 is the IPv6 underlay socket (nil without one): egress stages datagrams
	// for peers with an IPv6 public address on it; its own ingress worker receives.
	conn6 *udpConn
	// under6: this worker only receives, from conn (an IPv6 socket)
	under6 bool
	table  *Table
	cnt    *counters
	log    *zap.Logger
	busy   *busyPoller // nil: one goroutine per direction, each waiting in the netpoller

	// egress (TUN -> UDP), owned by the egress goroutine
	vnet    bool // the queue has TUN offloads: virtio-net headers, super packets
	uso     bool // and UDP segmentation offload: UDP runs are coalesced on ingress
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
	isrc6  [][16]byte // sources on the IPv6 socket (under6)
	iout   [][][]byte
	isegs  []int
	udpGRO bool // receive buffers sized for UDP GRO
	// maxDgram is the largest datagram taken from a peer (larger ones are dropped
	// as DropOversized, also when UDP GRO buffers would hold them)
	maxDgram int
	// gather writes packets in pieces (the TUN's WriteGather); nil: joinWrite
	gather  gatherWriter
	pieces  [][]byte // backing array of the pieces of out's packets
	rhdrs   [][]byte // headers of coalesced runs (offload only)
	join    []byte   // one packet joined for Write (without gather)
	joinBuf [1][]byte
	// per batch state of ingressProcess
	out      [][][]byte // packets to write, as pieces
	npieces  int        // pieces in use
	nrhdr    int        // run headers in use
	run      groRun
	inRun    bool        // a run is open
	runOut   int         // the run's packet in out, once it has two
	runStart int         // and its first piece
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
		if u, ok := tun.(interface{ USO() bool }); ok && u.USO() {
			w.uso = true
		}
		egressLen = maxSuperPacket
		reads, slots = min(batch, offloadReads), batch*offloadSlotsPerRead
	}
	recvs := batch
	w.maxDgram = ingressLen
	if w.vnet && udpGRO {
		w.udpGRO = true
		ingressLen = maxSuperPacket
		recvs = min(batch, groRecvs)
	}
	w.ibufs, w.isizes, w.isrc, w.isegs = make([][]byte, recvs), make([]int, recvs), make([]uint32, recvs), make([]int, recvs)
	// Every datagram adds at most two pieces: a header and its payload, or a zero
	// virtio-net header and itself.
	dgrams := recvs
	if w.udpGRO {
		dgrams = recvs * groMaxDatagrams
	}
	w.iout, w.pieces = make([][][]byte, 0, dgrams), make([][]byte, 2*dgrams)
	if g, ok := tun.(gatherWriter); ok {
		w.gather = g
	} else if w.vnet {
		w.join = make([]byte, Headroom+max(ingressLen, groMaxLen))
	} else {
		w.join = make([]byte, Headroom+ingressLen)
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
		w.rhdrs = make([][]byte, runHeaders)
		for i := range w.rhdrs {
			w.rhdrs[i] = make([]byte, groHdrLen)
		}
	}
	w.icmp[0] = make([]byte, Headroom+max(icmpBufLen, icmp6MaxLen))
	return w
}

// With TUN offloads a worker reads at most offloadReads super packets per batch and
// has offloadSlotsPerRead send slots per packet of Config.Batch.
const (
	offloadReads        = 16
	offloadSlotsPerRead = 4
)

// runHeaders is how many coalesced runs a worker queues before it writes them.
const runHeaders = 64

// gatherWriter is a TUN queue that writes each packet from pieces (writev), as
// tun.Queue does: coalesced runs go out without being copied together first. The
// pieces are the whole frame, the virtio-net header first when the queue has one.
type gatherWriter interface {
	WriteGather(pkts [][][]byte) (int, error)
}

// With UDP GRO a worker receives into groRecvs buffers of 64 KiB, each holding up to
// groMaxDatagrams datagrams.
const (
	groRecvs        = 32
	groMaxDatagrams = 64
)

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
