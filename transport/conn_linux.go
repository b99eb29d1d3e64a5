package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Conn is a UDP socket with sendmmsg/recvmmsg batches over vectors allocated once.
// One goroutine sends, with tx, and one receives, with rx; they share only what
// Listen sets (and mmsg).
//
// It calls sendmmsg/recvmmsg itself rather than golang.org/x/net/ipv4's
// PacketConn.WriteBatch/ReadBatch: BenchmarkBatchIO (batchio_linux_test.go, loopback,
// send a batch and receive it, medians of 6 in one run on the 2-core VM) measured
// 32 x 64 B 117 us raw vs 149 us x/net, 32 x 1400 B 114 vs 141 us, 8 x 64 B 29 vs
// 31 us, 8 x 1400 B 38 vs 32 us; and x/net allocates two objects (52 B) per datagram
// per call, where the data path allocates nothing per packet. A later single run on
// the loaded VM had them level (32 x 64 B 120 vs 118 us, 32 x 1400 B 125 vs 131 us):
// the syscalls dominate and speed is within noise at best; the allocations per
// datagram, which the design rules out, decide it for the raw calls.
//
// Every send and receive is MSG_DONTWAIT and made with RawSyscall, as the TUN queue's
// reads and writes are (see tun/raw_linux.go): a call that cannot sleep need not
// enter the scheduler's syscall state, and skipping it keeps the runtime's monitor
// thread asleep when a packet wakes an idle daemon.
type Conn struct {
	c  *net.UDPConn
	rc syscall.RawConn
	v6 bool // an IPv6 socket (the IPv6 underlay)
	// dual: an IPv6 socket that takes IPv4 too, as IPv4-mapped addresses
	dual bool
	// mmsg: sendmmsg/recvmmsg in use (else one sendmsg/recvmsg per packet); the
	// first side to find them missing (ENOSYS) switches both off for good.
	mmsg bool

	// tx is the send side: messages, each with its iovecs taken from one pool and,
	// for UDP GSO, a control message giving the segment size. The sending goroutine
	// owns it.
	tx struct {
		gso    bool // UDP_SEGMENT in use
		hdrs   []unix.Mmsghdr
		names  []unix.RawSockaddrInet4
		names6 []unix.RawSockaddrInet6 // on an IPv6 socket, the names in use
		ctrl   []byte
		from   []Local // each message's source (zero: the route's)
		segs   []int   // datagrams per message
		iov    []unix.Iovec
		fn     func(uintptr) bool // doSend, bound once so that send does not allocate
		n      int                // messages staged
		niov   int                // iovecs staged
		done   int                // messages sent
		failed int                // datagrams that failed
		err    error
		// the last staged message as a run that stageRun may extend (UDP GSO)
		runOpen  bool
		runTo    netip.AddrPort
		runFrom  Local
		runSeg   int // datagram size of the run
		runSegs  int
		runBytes int
	}

	// The goroutines write tx and rx: keep them off each other's cache lines.
	_ [cacheLine]byte

	// rx is the receive side, owned by the receiving goroutine.
	rx struct {
		gro     bool // UDP_GRO in use: a message may hold many datagrams of one size
		nameLen uint32
		hdrs    []unix.Mmsghdr
		iov     []unix.Iovec
		names   []unix.RawSockaddrInet4
		names6  []unix.RawSockaddrInet6 // on an IPv6 socket, the names in use
		ctrl    []byte
		local   bool // IP_PKTINFO / IPV6_RECVPKTINFO in use
		bufs    [][]byte
		fn      func(uintptr) bool // doRecv, bound once
		n       int                // messages the last call received
		err     error
		try     bool // tryRecv: return on EAGAIN instead of waiting
	}
}

// ctrlLen is the room for a sent message's control messages (UDP_SEGMENT, the
// source), rctrlLen for a received one's (UDP_GRO, the local address).
var (
	pktinfoLen = max(unix.SizeofInet4Pktinfo, unix.SizeofInet6Pktinfo)
	ctrlLen    = unix.CmsgSpace(2) + unix.CmsgSpace(pktinfoLen)
	rctrlLen   = unix.CmsgSpace(4) + unix.CmsgSpace(pktinfoLen)
)

// Listen opens a socket with room to stage o.Messages messages of o.Iovecs pieces in
// all, receiving into rbufs (one message each; the caller owns them and reads
// datagram i of a batch from rbufs[i][:Size(i)]).
func Listen(o Options, rbufs [][]byte, log *zap.Logger) (*Conn, error) {
	if o.LocalAddrs && o.DualStack {
		return nil, fmt.Errorf("%w: LocalAddrs with DualStack", ErrOption)
	}
	var serr error
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		err := c.Control(func(fd uintptr) {
			if o.ReusePort {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
				if serr != nil {
					serr = fmt.Errorf("SO_REUSEPORT: %w", serr)
					return
				}
			}
			if o.SocketBuffer > 0 {
				setBuf(int(fd), unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, o.SocketBuffer, log)
				setBuf(int(fd), unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, o.SocketBuffer, log)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	laddr, network := fmt.Sprintf(":%d", o.Port), "udp4"
	if o.IPv6 {
		laddr, network = fmt.Sprintf("[::]:%d", o.Port), "udp6" // Go sets IPV6_V6ONLY for udp6
	}
	if o.DualStack {
		network = "udp" // Go clears IPV6_V6ONLY: IPv4 arrives as IPv4-mapped IPv6
	}
	if o.Addr.IsValid() {
		laddr = netip.AddrPortFrom(o.Addr, uint16(o.Port)).String()
	}
	var c *net.UDPConn
	if o.From != nil {
		var err error
		if c, err = goOn(o, log); err != nil {
			return nil, fmt.Errorf("udp %s: %w", laddr, err)
		}
	} else {
		pc, err := lc.ListenPacket(context.Background(), network, laddr)
		if err != nil {
			return nil, fmt.Errorf("udp %s: listen: %w", laddr, err)
		}
		c = pc.(*net.UDPConn)
	}
	msgs, iovs := max(o.Messages, 1), max(o.Iovecs, 1)
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("udp port %d: raw conn: %w", o.Port, err)
	}
	u := &Conn{c: c, rc: rc, mmsg: o.Mmsg, v6: o.IPv6}
	if o.DualStack {
		// One socket for both families where the host has IPv6; Go falls back to an
		// IPv4 socket where it has not.
		_ = rc.Control(func(fd uintptr) {
			d, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
			u.v6 = err == nil && d == unix.AF_INET6
		})
		u.dual = u.v6
	}
	u.tx.hdrs, u.tx.iov = make([]unix.Mmsghdr, msgs), make([]unix.Iovec, iovs)
	u.tx.names, u.tx.ctrl, u.tx.segs = make([]unix.RawSockaddrInet4, msgs), make([]byte, msgs*ctrlLen), make([]int, msgs)
	u.tx.from = make([]Local, msgs)
	u.rx.hdrs, u.rx.iov = make([]unix.Mmsghdr, len(rbufs)), make([]unix.Iovec, len(rbufs))
	u.rx.names, u.rx.bufs = make([]unix.RawSockaddrInet4, len(rbufs)), rbufs
	u.rx.ctrl, u.rx.nameLen = make([]byte, len(rbufs)*rctrlLen), unix.SizeofSockaddrInet4
	if u.v6 {
		u.rx.nameLen = unix.SizeofSockaddrInet6
		u.tx.names6, u.rx.names6 = make([]unix.RawSockaddrInet6, msgs), make([]unix.RawSockaddrInet6, len(rbufs))
	}
	for i := range u.tx.hdrs {
		u.tx.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&u.tx.names[i]))
		u.tx.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
		u.tx.names[i].Family = unix.AF_INET
		if u.v6 {
			u.tx.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&u.tx.names6[i]))
			u.tx.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
			u.tx.names6[i].Family = unix.AF_INET6
		}
	}
	for i := range u.rx.hdrs {
		u.rx.iov[i].Base = &rbufs[i][0]
		u.rx.iov[i].SetLen(len(rbufs[i]))
		u.rx.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&u.rx.names[i]))
		if u.v6 {
			u.rx.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&u.rx.names6[i]))
		}
		u.rx.hdrs[i].Hdr.Iov = &u.rx.iov[i]
		u.rx.hdrs[i].Hdr.SetIovlen(1)
	}
	u.tx.fn, u.rx.fn = u.doSend, u.doRecv
	if o.LocalAddrs {
		var err error
		if cerr := rc.Control(func(fd uintptr) {
			if u.v6 {
				err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
			} else {
				err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
			}
		}); cerr != nil {
			err = cerr
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("udp port %d: packet info: %w", o.Port, err)
		}
		u.rx.local = true
	}
	if o.GRO {
		_ = rc.Control(func(fd uintptr) {
			u.rx.gro = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1) == nil
		})
		if !u.rx.gro {
			log.Info("UDP GRO not available; one datagram per message")
		}
	}
	if o.GSO {
		// Probe: kernels without UDP GSO (before 4.18) do not know the option.
		_ = rc.Control(func(fd uintptr) {
			_, err := unix.GetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT)
			u.tx.gso = err == nil
		})
		if !u.tx.gso {
			log.Info("UDP GSO not available; one datagram per message")
		}
	}
	return u, nil
}

// goOn takes a copy of o.From, a socket opened before (by an earlier weftd), when it
// is the one o describes, and sets o's buffer sizes on it.
func goOn(o Options, log *zap.Logger) (*net.UDPConn, error) {
	fc, err := net.FilePacketConn(o.From)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSocket, err)
	}
	c, ok := fc.(*net.UDPConn)
	if !ok {
		fc.Close()
		return nil, fmt.Errorf("%w: a %s socket", ErrSocket, fc.LocalAddr().Network())
	}
	la := c.LocalAddr().(*net.UDPAddr).AddrPort()
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %w", ErrSocket, err)
	}
	domain, v6only := -1, 0
	_ = rc.Control(func(fd uintptr) {
		if d, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN); err == nil {
			domain = d
		}
		if domain == unix.AF_INET6 {
			v6only, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_V6ONLY)
		}
		if o.SocketBuffer > 0 {
			setBuf(int(fd), unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, o.SocketBuffer, log)
			setBuf(int(fd), unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, o.SocketBuffer, log)
		}
	})
	var why string
	switch {
	case o.Port != 0 && int(la.Port()) != o.Port:
		why = fmt.Sprintf("bound to port %d", la.Port())
	case o.Addr.IsValid() && la.Addr().Unmap() != o.Addr.Unmap():
		why = fmt.Sprintf("bound to %s", la.Addr())
	case o.DualStack && domain == unix.AF_INET6 && v6only != 0:
		why = "IPv6 only"
	case o.IPv6 && (domain != unix.AF_INET6 || v6only == 0):
		why = "not IPv6 only"
	case !o.IPv6 && !o.DualStack && domain != unix.AF_INET:
		why = "not IPv4"
	}
	if why != "" {
		c.Close()
		return nil, fmt.Errorf("%w: %s", ErrSocket, why)
	}
	return c, nil
}

// File is a copy of the socket, to pass on (Options.From): closing either leaves the
// other open, and what reaches the socket waits there for whichever reads it.
func (u *Conn) File() (*os.File, error) { return u.c.File() }

func setBuf(fd, force, plain, n int, log *zap.Logger) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, n) == nil {
		return
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, n); err != nil {
		log.Warn("socket buffer size refused", zap.Int("bytes", n), zap.Error(err))
	}
}

// BufSizes reports the kernel's receive and send buffer sizes.
func (u *Conn) BufSizes() (rcv, snd int) {
	_ = u.rc.Control(func(fd uintptr) {
		rcv, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		snd, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	})
	return rcv, snd
}

// LocalAddr is the socket's address.
func (u *Conn) LocalAddr() netip.AddrPort { return u.c.LocalAddr().(*net.UDPAddr).AddrPort() }

// GSO reports whether UDP GSO is in use: End may stage runs. A send the path refuses
// switches it off for good.
func (u *Conn) GSO() bool { return u.tx.gso }

// GRO reports whether UDP GRO is in use: a received message may hold many datagrams.
func (u *Conn) GRO() bool { return u.rx.gro }

// Staged is the number of messages staged and not yet sent.
func (u *Conn) Staged() int { return u.tx.n }

// SetReadDeadline makes a Recv waiting at t, or called after it, return an error
// that wraps os.ErrDeadlineExceeded; what is queued before then is received.
func (u *Conn) SetReadDeadline(t time.Time) error { return u.c.SetReadDeadline(t) }

// Close closes the socket; a Recv or Send waiting on it returns an error.
func (u *Conn) Close() error {
	if err := u.c.Close(); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}
