package proxy

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

// udpConn is a worker's UDP socket with sendmmsg/recvmmsg batches over vectors
// allocated once. One goroutine sends, with tx, and one receives, with rx; they share
// only what listenUDP sets (and mmsg).
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
type udpConn struct {
	c    *net.UDPConn
	rc   syscall.RawConn
	port uint16
	v6   bool // an IPv6 socket (the IPv6 underlay)
	// mmsg: sendmmsg/recvmmsg in use (else one sendmsg/recvmsg per packet); the
	// first side to find them missing (ENOSYS) switches both off for good.
	mmsg bool

	// tx is the send side: messages, each with its iovecs taken from one pool and,
	// for UDP GSO, a control message giving the segment size. The worker's egress
	// goroutine owns it, also on its IPv6 socket, which another worker receives on.
	tx struct {
		gso    bool // UDP_SEGMENT in use
		hdrs   []unix.Mmsghdr
		names  []unix.RawSockaddrInet4
		names6 []unix.RawSockaddrInet6 // on an IPv6 socket, the names in use
		ctrl   []byte
		segs   []int // datagrams per message
		iov    []unix.Iovec
		fn     func(uintptr) bool // doSend, bound once so that send does not allocate
		dst6   [16]byte           // where begin addresses the next message (IPv6 socket)
		n      int                // messages staged
		niov   int                // iovecs staged
		done   int                // messages sent
		failed int                // datagrams that failed
		err    error
		// the last staged message as a run that stageRun may extend (UDP GSO)
		runOpen  bool
		runIP    uint32
		runIP6   [16]byte
		runSeg   int // datagram size of the run
		runSegs  int
		runBytes int
	}

	// The goroutines write tx and rx: keep them off each other's cache lines.
	_ [cacheLine]byte

	// rx is the receive side, owned by the ingress goroutine of the worker that
	// listens on this socket.
	rx struct {
		gro     bool // UDP_GRO in use: a message may hold many datagrams of one size
		nameLen uint32
		hdrs    []unix.Mmsghdr
		iov     []unix.Iovec
		names   []unix.RawSockaddrInet4
		names6  []unix.RawSockaddrInet6 // on an IPv6 socket, the names in use
		ctrl    []byte
		bufs    [][]byte
		fn      func(uintptr) bool // doRecv, bound once
		n       int                // messages the last call received
		err     error
		try     bool // tryRecv: return on EAGAIN instead of waiting
	}
}

// sockOpts are the socket features a worker asks for; each can be switched off.
type sockOpts struct {
	addr      netip.Addr // zero: every address
	port      int
	reusePort bool
	bufBytes  int // <= 0: kernel default
	mmsg      bool
	gso       bool // try UDP_SEGMENT
	gro       bool // try UDP_GRO
	v6        bool // an IPv6 socket (IPV6_V6ONLY) instead of an IPv4 one
}

// ctrlLen is the room for one UDP_SEGMENT control message, rctrlLen for a UDP_GRO
// one.
var ctrlLen, rctrlLen = unix.CmsgSpace(2), unix.CmsgSpace(4)

// listenUDP opens a socket with msgs send messages, iovs send iovecs, and rbufs to
// receive into.
func listenUDP(o sockOpts, msgs, iovs int, rbufs [][]byte, log *zap.Logger) (*udpConn, error) {
	var serr error
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		err := c.Control(func(fd uintptr) {
			if o.reusePort {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
				if serr != nil {
					serr = fmt.Errorf("SO_REUSEPORT: %w", serr)
					return
				}
			}
			if o.bufBytes > 0 {
				setBuf(int(fd), unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, o.bufBytes, log)
				setBuf(int(fd), unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, o.bufBytes, log)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	laddr, network := fmt.Sprintf(":%d", o.port), "udp4"
	if o.v6 {
		laddr, network = fmt.Sprintf("[::]:%d", o.port), "udp6" // Go sets IPV6_V6ONLY for udp6
	}
	if o.addr.IsValid() {
		laddr = netip.AddrPortFrom(o.addr, uint16(o.port)).String()
	}
	pc, err := lc.ListenPacket(context.Background(), network, laddr)
	if err != nil {
		return nil, fmt.Errorf("udp %s: listen: %w", laddr, err)
	}
	c := pc.(*net.UDPConn)
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("udp port %d: raw conn: %w", o.port, err)
	}
	u := &udpConn{c: c, rc: rc, port: uint16(o.port), mmsg: o.mmsg, v6: o.v6}
	u.tx.hdrs, u.tx.iov = make([]unix.Mmsghdr, msgs), make([]unix.Iovec, iovs)
	u.tx.names, u.tx.ctrl, u.tx.segs = make([]unix.RawSockaddrInet4, msgs), make([]byte, msgs*ctrlLen), make([]int, msgs)
	u.rx.hdrs, u.rx.iov = make([]unix.Mmsghdr, len(rbufs)), make([]unix.Iovec, len(rbufs))
	u.rx.names, u.rx.bufs = make([]unix.RawSockaddrInet4, len(rbufs)), rbufs
	u.rx.ctrl, u.rx.nameLen = make([]byte, len(rbufs)*rctrlLen), unix.SizeofSockaddrInet4
	if o.v6 {
		u.rx.nameLen = unix.SizeofSockaddrInet6
		u.tx.names6, u.rx.names6 = make([]unix.RawSockaddrInet6, msgs), make([]unix.RawSockaddrInet6, len(rbufs))
	}
	for i := range u.tx.hdrs {
		u.tx.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&u.tx.names[i]))
		u.tx.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
		u.tx.names[i].Family = unix.AF_INET
		if o.v6 {
			u.tx.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&u.tx.names6[i]))
			u.tx.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
			u.tx.names6[i].Family = unix.AF_INET6
			binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&u.tx.names6[i].Port))[:], u.port)
		}
		c := u.tx.ctrl[i*ctrlLen : (i+1)*ctrlLen]
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&u.tx.names[i].Port))[:], u.port)
	}
	for i := range u.rx.hdrs {
		u.rx.iov[i].Base = &rbufs[i][0]
		u.rx.iov[i].SetLen(len(rbufs[i]))
		u.rx.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&u.rx.names[i]))
		if o.v6 {
			u.rx.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&u.rx.names6[i]))
		}
		u.rx.hdrs[i].Hdr.Iov = &u.rx.iov[i]
		u.rx.hdrs[i].Hdr.SetIovlen(1)
	}
	u.tx.fn, u.rx.fn = u.doSend, u.doRecv
	if o.gro {
		_ = rc.Control(func(fd uintptr) {
			u.rx.gro = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1) == nil
		})
		if !u.rx.gro {
			log.Info("UDP GRO not available; one datagram per message")
		}
	}
	if o.gso {
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

// bufSizes reports the kernel's receive and send buffer sizes.
func (u *udpConn) bufSizes() (rcv, snd int) {
	_ = u.rc.Control(func(fd uintptr) {
		rcv, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		snd, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	})
	return rcv, snd
}

// room reports whether one more message with iovs iovecs fits.
func (u *udpConn) room(iovs int) bool {
	return u.tx.n < len(u.tx.hdrs) && u.tx.niov+iovs <= len(u.tx.iov)
}

// stage adds a message of one datagram, pkt, for the host at ip (big-endian).
func (u *udpConn) stage(pkt []byte, ip uint32) {
	u.begin(ip)
	u.addIov(pkt)
	u.end(1, 0)
}

// stageRun adds pkt, one datagram for the host at ip, to the last staged message
// when that is a run it may join, else as a message of its own. A run is a UDP GSO
// message: datagrams to one host, all of one size but the last, which may be
// shorter; the kernel sends them as separate datagrams (one inner packet each, as
// flannel does), but they cross the sending and receiving stacks as one.
func (u *udpConn) stageRun(pkt []byte, ip uint32) {
	if u.tx.runOpen && u.tx.gso && u.tx.runIP == ip && (!u.v6 || u.tx.runIP6 == u.tx.dst6) && len(pkt) <= u.tx.runSeg && u.tx.runSegs < udpMaxSegments &&
		u.tx.runBytes+len(pkt) <= maxUDPPayload && u.tx.niov < len(u.tx.iov) {
		u.tx.n-- // reopen the last message
		u.addIov(pkt)
		u.tx.runSegs++
		u.tx.runBytes += len(pkt)
		u.tx.runOpen = len(pkt) == u.tx.runSeg
		u.end(u.tx.runSegs, u.tx.runSeg)
		return
	}
	u.stage(pkt, ip)
	u.tx.runOpen, u.tx.runIP, u.tx.runSeg, u.tx.runSegs, u.tx.runBytes = true, ip, len(pkt), 1, len(pkt)
	u.tx.runIP6 = u.tx.dst6
}

// begin starts a message to ip (on an IPv6 socket: to tx.dst6); addIov appends to it; end ends it, with segs
// datagrams of segSize bytes each (the last may be shorter) when segs > 1, which
// needs UDP GSO.
func (u *udpConn) begin(ip uint32) {
	u.tx.runOpen = false
	m := &u.tx.hdrs[u.tx.n]
	m.Hdr.Iov = &u.tx.iov[u.tx.niov]
	m.Hdr.Iovlen = 0
	if u.v6 {
		u.tx.names6[u.tx.n].Addr = u.tx.dst6
		return
	}
	binary.BigEndian.PutUint32(u.tx.names[u.tx.n].Addr[:], ip)
}

func (u *udpConn) addIov(b []byte) {
	v := &u.tx.iov[u.tx.niov]
	v.Base = &b[0]
	v.SetLen(len(b))
	u.tx.niov++
	u.tx.hdrs[u.tx.n].Hdr.Iovlen++
}

func (u *udpConn) end(segs, segSize int) {
	m := &u.tx.hdrs[u.tx.n]
	if segs > 1 {
		c := u.tx.ctrl[u.tx.n*ctrlLen : (u.tx.n+1)*ctrlLen]
		binary.NativeEndian.PutUint16(c[unix.CmsgLen(0):], uint16(segSize))
		m.Hdr.Control = &c[0]
		m.Hdr.SetControllen(ctrlLen)
	} else {
		m.Hdr.Control = nil
		m.Hdr.SetControllen(0)
	}
	u.tx.segs[u.tx.n] = segs
	u.tx.n++
}

// send sends the staged messages and empties the stage. It returns how many
// datagrams failed and the first error.
func (u *udpConn) send() (failed int, err error) {
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

func (u *udpConn) doSend(fd uintptr) bool {
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

// recv receives up to len(rx.bufs) datagrams, waiting for the first. Datagram i is
// rx.bufs[i][:u.size(i)] from u.src(i); a size beyond the buffer (MSG_TRUNC gives
// the datagram's real length) means the datagram did not fit and was cut.
func (u *udpConn) recv() (int, error) { return u.receive(false) }

// tryRecv is recv without the wait: 0 datagrams and no error when none is queued.
func (u *udpConn) tryRecv() (int, error) { return u.receive(true) }

// fd gives the socket's descriptor to f, for poll(2) beside other sources.
func (u *udpConn) fd(f func(fd uintptr)) error { return u.rc.Control(f) }

func (u *udpConn) receive(try bool) (int, error) {
	u.rx.n, u.rx.err, u.rx.try = 0, nil, try
	if err := u.rc.Read(u.rx.fn); err != nil {
		return 0, err
	}
	return u.rx.n, u.rx.err
}

func (u *udpConn) doRecv(fd uintptr) bool {
	for {
		var r uintptr
		var e syscall.Errno
		if u.mmsg {
			for i := range u.rx.hdrs {
				u.rx.hdrs[i].Hdr.Namelen = u.rx.nameLen
				u.rx.hdrs[i].Hdr.Flags = 0
				if u.rx.gro {
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
func (u *udpConn) recvEach(fd uintptr) (uintptr, syscall.Errno) {
	n := 0
	for n < len(u.rx.hdrs) {
		h := &u.rx.hdrs[n]
		h.Hdr.Namelen = u.rx.nameLen
		h.Hdr.Flags = 0
		if u.rx.gro {
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

func (u *udpConn) size(i int) int { return int(u.rx.hdrs[i].Len) }

// segSize is the size of each datagram coalesced into message i (UDP GRO), 0 for a
// message of one datagram.
func (u *udpConn) segSize(i int) int {
	h := &u.rx.hdrs[i].Hdr
	if !u.rx.gro || int(h.Controllen) < unix.CmsgLen(4) {
		return 0
	}
	c := u.rx.ctrl[i*rctrlLen:]
	m := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
	if m.Level != unix.SOL_UDP || m.Type != unix.UDP_GRO {
		return 0
	}
	return int(binary.NativeEndian.Uint32(c[unix.CmsgLen(0):]))
}

func (u *udpConn) src(i int) uint32 { return binary.BigEndian.Uint32(u.rx.names[i].Addr[:]) }

// src6 is the source of message i on an IPv6 socket.
func (u *udpConn) src6(i int) [16]byte { return u.rx.names6[i].Addr }

func (u *udpConn) close() error {
	if err := u.c.Close(); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}
