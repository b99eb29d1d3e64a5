package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
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
	pc, err := lc.ListenPacket(context.Background(), network, laddr)
	if err != nil {
		return nil, fmt.Errorf("udp %s: listen: %w", laddr, err)
	}
	msgs, iovs := max(o.Messages, 1), max(o.Iovecs, 1)
	c := pc.(*net.UDPConn)
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

// Room reports whether one more message with iovs pieces fits.
func (u *Conn) Room(iovs int) bool {
	return u.tx.n < len(u.tx.hdrs) && u.tx.niov+iovs <= len(u.tx.iov)
}

// Stage adds a message of one datagram, pkt, to to. It fails, staging nothing, with
// ErrFamily when to is not of the socket's family (IPv4-mapped IPv6 is IPv4).
func (u *Conn) Stage(pkt []byte, to netip.AddrPort) error { return u.StageFrom(pkt, to, Local{}) }

// StageFrom is Stage with the source address from (zero: the route's).
func (u *Conn) StageFrom(pkt []byte, to netip.AddrPort, from Local) error {
	if err := u.BeginFrom(to, from); err != nil {
		return err
	}
	u.AddIov(pkt)
	u.End(1, 0)
	return nil
}

// StageRun adds pkt, one datagram to to, to the last staged message
// when that is a run it may join, else as a message of its own. A run is a UDP GSO
// message: datagrams to one host, all of one size but the last, which may be
// shorter; the kernel sends them as separate datagrams (one inner packet each, as
// flannel does), but they cross the sending and receiving stacks as one.
func (u *Conn) StageRun(pkt []byte, to netip.AddrPort) error {
	return u.StageRunFrom(pkt, to, Local{})
}

// StageRunFrom is StageRun with the source address from (zero: the route's); a run
// has one source.
func (u *Conn) StageRunFrom(pkt []byte, to netip.AddrPort, from Local) error {
	if u.tx.runOpen && u.tx.gso && u.tx.runTo == to && u.tx.runFrom == from && len(pkt) <= u.tx.runSeg && u.tx.runSegs < MaxSegments &&
		u.tx.runBytes+len(pkt) <= MaxUDPPayload && u.tx.niov < len(u.tx.iov) {
		u.tx.n-- // reopen the last message
		u.AddIov(pkt)
		u.tx.runSegs++
		u.tx.runBytes += len(pkt)
		u.tx.runOpen = len(pkt) == u.tx.runSeg
		u.End(u.tx.runSegs, u.tx.runSeg)
		return nil
	}
	if err := u.StageFrom(pkt, to, from); err != nil {
		return err
	}
	u.tx.runOpen, u.tx.runTo, u.tx.runFrom = true, to, from
	u.tx.runSeg, u.tx.runSegs, u.tx.runBytes = len(pkt), 1, len(pkt)
	return nil
}

// Begin starts a message to to; AddIov appends a piece to it; End ends it, with segs
// datagrams of segSize bytes each (the last may be shorter) when segs > 1, which
// needs UDP GSO. The caller checks Room first. Begin fails with ErrFamily, starting
// nothing, when to is not of the socket's family.
func (u *Conn) Begin(to netip.AddrPort) error { return u.BeginFrom(to, Local{}) }

// BeginFrom is Begin with the source address from (zero: the route's): the message
// leaves from from.Addr, on from.Ifindex if not 0 (IP_PKTINFO, IPV6_PKTINFO). It
// fails with ErrFamily when from is not of the socket's family.
func (u *Conn) BeginFrom(to netip.AddrPort, from Local) error {
	if from.IsValid() {
		fa := from.Addr
		if u.v6 && (!fa.Is6() || fa.Is4In6()) || !u.v6 && !fa.Unmap().Is4() {
			return ErrFamily
		}
	}
	a := to.Addr()
	if u.v6 {
		if a.Is4() && u.dual {
			a = netip.AddrFrom16(a.As16())
		} else if !a.Is6() || a.Is4In6() && !u.dual {
			return ErrFamily
		}
		u.tx.names6[u.tx.n].Addr = a.As16()
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&u.tx.names6[u.tx.n].Port))[:], to.Port())
	} else {
		if a = a.Unmap(); !a.Is4() {
			return ErrFamily
		}
		u.tx.names[u.tx.n].Addr = a.As4()
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&u.tx.names[u.tx.n].Port))[:], to.Port())
	}
	u.tx.runOpen = false
	u.tx.from[u.tx.n] = from
	m := &u.tx.hdrs[u.tx.n]
	m.Hdr.Iov = &u.tx.iov[u.tx.niov]
	m.Hdr.Iovlen = 0
	return nil
}

// AddIov appends b, as it is (not copied), to the message Begin started.
func (u *Conn) AddIov(b []byte) {
	v := &u.tx.iov[u.tx.niov]
	v.Base = &b[0]
	v.SetLen(len(b))
	u.tx.niov++
	u.tx.hdrs[u.tx.n].Hdr.Iovlen++
}

// End closes the message Begin started.
func (u *Conn) End(segs, segSize int) {
	m := &u.tx.hdrs[u.tx.n]
	c := u.tx.ctrl[u.tx.n*ctrlLen : (u.tx.n+1)*ctrlLen]
	off := 0
	if segs > 1 {
		off = putCmsg(c, off, unix.SOL_UDP, unix.UDP_SEGMENT, 2)
		binary.NativeEndian.PutUint16(c[off-unix.CmsgSpace(2)+unix.CmsgLen(0):], uint16(segSize))
	}
	if from := u.tx.from[u.tx.n]; from.IsValid() {
		if u.v6 {
			off = putCmsg(c, off, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unix.SizeofInet6Pktinfo)
			pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&c[off-unix.CmsgSpace(unix.SizeofInet6Pktinfo)+unix.CmsgLen(0)]))
			pi.Addr, pi.Ifindex = from.Addr.As16(), uint32(from.Ifindex)
		} else {
			off = putCmsg(c, off, unix.IPPROTO_IP, unix.IP_PKTINFO, unix.SizeofInet4Pktinfo)
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&c[off-unix.CmsgSpace(unix.SizeofInet4Pktinfo)+unix.CmsgLen(0)]))
			pi.Ifindex, pi.Spec_dst, pi.Addr = int32(from.Ifindex), from.Addr.Unmap().As4(), [4]byte{}
		}
	}
	if off > 0 {
		m.Hdr.Control = &c[0]
		m.Hdr.SetControllen(off)
	} else {
		m.Hdr.Control = nil
		m.Hdr.SetControllen(0)
	}
	u.tx.segs[u.tx.n] = segs
	u.tx.n++
}

// Send sends the staged messages and empties the stage. It returns how many
// datagrams failed and the first error; a failed message does not stop the ones
// after it. A full socket buffer (EAGAIN) waits for room, as a blocking send would.
func (u *Conn) Send() (failed int, err error) {
	u.tx.done, u.tx.failed, u.tx.err = 0, 0, nil
	if werr := u.rc.Write(u.tx.fn); werr != nil {
		for i := u.tx.done; i < u.tx.n; i++ {
			u.tx.failed += u.tx.segs[i]
		}
		u.tx.err = werr
	}
	u.tx.n, u.tx.niov, u.tx.runOpen = 0, 0, false
	return u.tx.failed, u.tx.err
}

// putCmsg writes a control message header for n bytes of data at off in c and
// returns the offset after the message (data included).
func putCmsg(c []byte, off int, level, typ int32, n int) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&c[off]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(n))
	return off + unix.CmsgSpace(n)
}

// cmsg finds the data of the control message level/typ among message i's received
// ones; nil if it has none.
func (u *Conn) cmsg(i int, level, typ int32) []byte {
	n := int(u.rx.hdrs[i].Hdr.Controllen)
	c := u.rx.ctrl[i*rctrlLen : i*rctrlLen+min(n, rctrlLen)]
	for off := 0; off+unix.CmsgLen(0) <= len(c); {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[off]))
		l := int(h.Len)
		if l < unix.CmsgLen(0) || off+l > len(c) {
			return nil
		}
		if h.Level == level && h.Type == typ {
			return c[off+unix.CmsgLen(0) : off+l]
		}
		off += unix.CmsgSpace(l - unix.CmsgLen(0))
	}
	return nil
}

func (u *Conn) doSend(fd uintptr) bool {
	for u.tx.done < u.tx.n {
		var r uintptr
		var e syscall.Errno
		if u.mmsg {
			r, _, e = unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&u.tx.hdrs[u.tx.done])),
				uintptr(u.tx.n-u.tx.done), unix.MSG_DONTWAIT, 0, 0)
		} else {
			h := &u.tx.hdrs[u.tx.done].Hdr
			_, _, e = unix.RawSyscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(h)), unix.MSG_DONTWAIT)
			r = 1
		}
		switch e {
		case 0:
			u.tx.done += int(r)
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		case unix.ENOSYS:
			if !u.mmsg {
				u.tx.err = fmt.Errorf("sendmsg: %w", e)
				for ; u.tx.done < u.tx.n; u.tx.done++ {
					u.tx.failed += u.tx.segs[u.tx.done]
				}
				return true
			}
			u.mmsg = false // probed the hard way: fall back for good
		default:
			// The first message of the rest failed: skip it, keep the others.
			if u.tx.segs[u.tx.done] > 1 && (e == unix.EIO || e == unix.EINVAL) {
				// The path refuses UDP GSO (e.g. a device without checksum
				// offload on an old kernel): one datagram per message from now on.
				u.tx.gso = false
				u.tx.err = fmt.Errorf("UDP GSO send refused, switched off: %w", e)
			}
			if u.tx.err == nil {
				to := net.IP(u.tx.names[u.tx.done].Addr[:])
				if u.v6 {
					to = net.IP(u.tx.names6[u.tx.done].Addr[:])
				}
				u.tx.err = fmt.Errorf("send to %v: %w", to, e)
			}
			u.tx.failed += u.tx.segs[u.tx.done]
			u.tx.done++
		}
	}
	return true
}

// Recv receives up to len(rbufs) messages, waiting for the first. Message i is
// rbufs[i][:Size(i)] from From(i); a size beyond the buffer (MSG_TRUNC gives the
// datagram's real length) means the datagram did not fit and was cut. With GRO a
// message may be several datagrams of SegSize(i) bytes each (the last may be
// shorter).
func (u *Conn) Recv() (int, error) { return u.receive(false) }

// TryRecv is Recv without the wait: 0 messages and no error when none is queued.
func (u *Conn) TryRecv() (int, error) { return u.receive(true) }

// Control gives the socket's descriptor to f, for poll(2) beside other sources or a
// socket option of the caller's.
func (u *Conn) Control(f func(fd uintptr)) error { return u.rc.Control(f) }

func (u *Conn) receive(try bool) (int, error) {
	u.rx.n, u.rx.err, u.rx.try = 0, nil, try
	if err := u.rc.Read(u.rx.fn); err != nil {
		return 0, err
	}
	return u.rx.n, u.rx.err
}

func (u *Conn) doRecv(fd uintptr) bool {
	for {
		var r uintptr
		var e syscall.Errno
		if u.mmsg {
			for i := range u.rx.hdrs {
				u.rx.hdrs[i].Hdr.Namelen = u.rx.nameLen
				u.rx.hdrs[i].Hdr.Flags = 0
				if u.rx.gro || u.rx.local {
					u.rx.hdrs[i].Hdr.Control = &u.rx.ctrl[i*rctrlLen]
					u.rx.hdrs[i].Hdr.SetControllen(rctrlLen)
				}
			}
			r, _, e = unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&u.rx.hdrs[0])),
				uintptr(len(u.rx.hdrs)), unix.MSG_DONTWAIT|unix.MSG_TRUNC, 0, 0)
		} else {
			r, e = u.recvEach(fd)
		}
		switch e {
		case 0:
			u.rx.n = int(r)
			return true
		case unix.EINTR:
		case unix.EAGAIN:
			return u.rx.try
		case unix.ENOSYS:
			if !u.mmsg {
				u.rx.err = fmt.Errorf("recvmsg: %w", e)
				return true
			}
			u.mmsg = false
		default:
			u.rx.err = fmt.Errorf("recv: %w", e)
			return true
		}
	}
}

// recvEach is the fallback without recvmmsg: recvmsg until the socket is empty.
func (u *Conn) recvEach(fd uintptr) (uintptr, syscall.Errno) {
	n := 0
	for n < len(u.rx.hdrs) {
		h := &u.rx.hdrs[n]
		h.Hdr.Namelen = u.rx.nameLen
		h.Hdr.Flags = 0
		if u.rx.gro || u.rx.local {
			h.Hdr.Control = &u.rx.ctrl[n*rctrlLen]
			h.Hdr.SetControllen(rctrlLen)
		}
		r, _, e := unix.RawSyscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&h.Hdr)), unix.MSG_DONTWAIT|unix.MSG_TRUNC)
		if e != 0 {
			if n > 0 && (e == unix.EAGAIN || e == unix.EINTR) {
				break
			}
			if n > 0 {
				break
			}
			return 0, e
		}
		h.Len = uint32(r)
		n++
	}
	return uintptr(n), 0
}

// Size is the length of message i of the last batch.
func (u *Conn) Size(i int) int { return int(u.rx.hdrs[i].Len) }

// SegSize is the size of each datagram coalesced into message i (UDP GRO), 0 for a
// message of one datagram.
func (u *Conn) SegSize(i int) int {
	if !u.rx.gro {
		return 0
	}
	if d := u.cmsg(i, unix.SOL_UDP, unix.UDP_GRO); len(d) >= 4 {
		return int(binary.NativeEndian.Uint32(d))
	}
	return 0
}

// Local is the local address message i of the last batch came to and the interface
// it came in on; zero without Options.LocalAddrs.
func (u *Conn) Local(i int) Local {
	if !u.rx.local {
		return Local{}
	}
	if u.v6 {
		if d := u.cmsg(i, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO); len(d) >= unix.SizeofInet6Pktinfo {
			pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&d[0]))
			return Local{Addr: netip.AddrFrom16(pi.Addr), Ifindex: int(pi.Ifindex)}
		}
		return Local{}
	}
	if d := u.cmsg(i, unix.IPPROTO_IP, unix.IP_PKTINFO); len(d) >= unix.SizeofInet4Pktinfo {
		pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&d[0]))
		// Spec_dst, the address a reply leaves from: the datagram's destination, or
		// for one sent to a broadcast address, the interface's.
		return Local{Addr: netip.AddrFrom4(pi.Spec_dst), Ifindex: int(pi.Ifindex)}
	}
	return Local{}
}

// From is the source of message i of the last batch.
func (u *Conn) From(i int) netip.AddrPort {
	if u.v6 {
		n := &u.rx.names6[i]
		a := netip.AddrFrom16(n.Addr)
		if u.dual {
			a = a.Unmap()
		}
		return netip.AddrPortFrom(a, binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&n.Port))[:]))
	}
	n := &u.rx.names[i]
	return netip.AddrPortFrom(netip.AddrFrom4(n.Addr), binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&n.Port))[:]))
}

// Close closes the socket; a Recv or Send waiting on it returns an error.
func (u *Conn) Close() error {
	if err := u.c.Close(); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}
