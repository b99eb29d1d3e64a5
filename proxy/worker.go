package proxy

import (
	"time"

	"github.com/weftnet/weft/transport"
	"github.com/weftnet/weft/tun/offload"

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

// worker moves packets between one TUN queue and one UDP socket. Two goroutines run
// it (one when it busy-polls): egress reads the TUN, looks peers up and sends with
// sendmmsg, and owns tx; ingress receives with recvmmsg, checks and writes the TUN,
// and owns rx. Both read the fields before tx, which do not change once New returns.
type worker struct {
	tun  TUN
	conn *transport.Conn
	// conn6 is the IPv6 underlay socket (nil without one): egress stages datagrams
	// for peers with an IPv6 public address on it; its own ingress worker receives.
	conn6 *transport.Conn
	// under6: this worker only receives, from conn (an IPv6 socket)
	under6 bool
	vnet   bool // the queue has TUN offloads: virtio-net headers, super packets
	uso    bool // and UDP segmentation offload: UDP runs are coalesced on ingress
	table  *Table
	cnt    *counters // both halves count here; padded off other workers' counters
	port   uint16    // the udp port: ours, and every peer's
	log    *zap.Logger
	busy   *busyPoller // nil: one goroutine per direction, each waiting in the netpoller

	// tx is the egress half (TUN -> UDP).
	tx struct {
		bufs   [][]byte // TUN reads, Headroom first
		sizes  []int
		seghdr [][]byte // segment headers (offload)
		slots  int      // send messages; twice as many iovecs
		icmp   [1][]byte
		// what is staged since the last flush
		nhdr          int         // seghdr in use
		pending       int         // bytes staged
		pendingDgrams int         // datagrams staged
		icmpLimit     tokenBucket // ICMP errors sent
		logLimit      tokenBucket // log lines of the egress side
	}

	// The goroutines write tx and rx: keep them off each other's cache lines.
	_ [cacheLine]byte

	// rx is the ingress half (UDP -> TUN).
	rx struct {
		bufs   [][]byte // datagrams received, Headroom first
		sizes  []int
		src    []uint32
		src6   [][16]byte // sources on the IPv6 socket (under6)
		segs   []int      // datagram size within a UDP GRO message, 0 for one datagram
		udpGRO bool       // receive buffers sized for UDP GRO
		// maxDgram is the largest datagram taken from a peer (larger ones are dropped
		// as DropOversized, also when UDP GRO buffers would hold them)
		maxDgram int
		// gather writes packets in pieces (the TUN's WriteGather); nil: joinWrite
		gather  gatherWriter
		outBuf  [][][]byte // backing array of out
		pieces  [][]byte   // backing array of the pieces of out's packets
		runHdrs [][]byte   // headers of coalesced runs (offload only)
		join    []byte     // one packet joined for Write (without gather)
		joinBuf [1][]byte
		// per batch state of ingressProcess
		out      [][][]byte // packets to write, as pieces
		npieces  int        // pieces in use
		nrunHdr  int        // runHdrs in use
		run      offload.Run
		inRun    bool        // a run is open
		runOut   int         // the run's packet in out, once it has two
		runStart int         // and its first piece
		logLimit tokenBucket // log lines of the ingress side
	}
}

// cacheLine is the size that separates what different goroutines write.
const cacheLine = 64

// newWorker allocates a worker's buffers. With TUN offloads and udpGRO, receive
// buffers are large enough for a UDP GRO message.
func newWorker(tun TUN, table *Table, batch, egressLen, ingressLen int, udpGRO bool, cnt *counters, log *zap.Logger) *worker {
	w := &worker{tun: tun, table: table, cnt: cnt, log: log}
	w.tx.icmpLimit = tokenBucket{burst: 10, every: int64(10 * time.Millisecond)}
	w.tx.logLimit = tokenBucket{burst: 1, every: int64(time.Second)}
	w.rx.logLimit = tokenBucket{burst: 1, every: int64(time.Second)}
	reads, slots := batch, batch
	if v, ok := tun.(interface{ VnetHdr() bool }); ok && v.VnetHdr() {
		// Reads bring up to 64 KiB each, cut into many segments.
		w.vnet = true
		if u, ok := tun.(interface{ USO() bool }); ok && u.USO() {
			w.uso = true
		}
		egressLen = offload.MaxSuperPacket
		reads, slots = min(batch, offloadReads), batch*offloadSlotsPerRead
	}
	recvs := batch
	w.rx.maxDgram = ingressLen
	if w.vnet && udpGRO {
		w.rx.udpGRO = true
		ingressLen = offload.MaxSuperPacket
		recvs = min(batch, groRecvs)
	}
	w.rx.bufs, w.rx.sizes, w.rx.src, w.rx.segs = make([][]byte, recvs), make([]int, recvs), make([]uint32, recvs), make([]int, recvs)
	// Every datagram adds at most two pieces: a header and its payload, or a zero
	// virtio-net header and itself.
	dgrams := recvs
	if w.rx.udpGRO {
		dgrams = recvs * groMaxDatagrams
	}
	w.rx.outBuf, w.rx.pieces = make([][][]byte, 0, dgrams), make([][]byte, 2*dgrams)
	if g, ok := tun.(gatherWriter); ok {
		w.rx.gather = g
	} else if w.vnet {
		w.rx.join = make([]byte, Headroom+max(ingressLen, offload.MaxSuperPacket))
	} else {
		w.rx.join = make([]byte, Headroom+ingressLen)
	}
	w.tx.bufs, w.tx.sizes = make([][]byte, reads), make([]int, reads)
	for i := range w.tx.bufs {
		w.tx.bufs[i] = make([]byte, Headroom+egressLen)
	}
	w.tx.slots = slots
	if w.vnet {
		w.tx.seghdr = make([][]byte, slots)
		for i := range w.tx.seghdr {
			w.tx.seghdr[i] = make([]byte, offload.MaxSegHeaders)
		}
	}
	for i := range w.rx.bufs {
		w.rx.bufs[i] = make([]byte, Headroom+ingressLen)
	}
	if w.vnet {
		w.rx.runHdrs = make([][]byte, runHeaders)
		for i := range w.rx.runHdrs {
			w.rx.runHdrs[i] = make([]byte, offload.RunHdrLen)
		}
	}
	w.tx.icmp[0] = make([]byte, Headroom+max(icmpBufLen, icmp6MaxLen))
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
