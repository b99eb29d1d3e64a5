package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// udpConn is a worker's UDP socket with sendmmsg/recvmmsg batches over vectors
// allocated once. One goroutine sends and one receives; they share nothing.
type udpConn struct {
	c    *net.UDPConn
	rc   syscall.RawConn
	port uint16
	mmsg bool // sendmmsg/recvmmsg in use (else one sendto/recvfrom per packet)

	shdrs  []unix.Mmsghdr
	siov   []unix.Iovec
	snames []unix.RawSockaddrInet4
	sn     int
	sdone  int
	sfail  int
	serr   error
	sendFn func(uintptr) bool

	rhdrs  []unix.Mmsghdr
	riov   []unix.Iovec
	rnames []unix.RawSockaddrInet4
	rbufs  [][]byte
	rn     int
	rerr   error
	recvFn func(uintptr) bool
}

// sockOpts are the socket features a worker asks for; each can be switched off.
type sockOpts struct {
	port      int
	reusePort bool
	bufBytes  int // <= 0: kernel default
	mmsg      bool
}

func listenUDP(o sockOpts, batch int, rbufs [][]byte, log *zap.Logger) (*udpConn, error) {
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
	pc, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf(":%d", o.port))
	if err != nil {
		return nil, fmt.Errorf("udp port %d: listen: %w", o.port, err)
	}
	c := pc.(*net.UDPConn)
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("udp port %d: raw conn: %w", o.port, err)
	}
	u := &udpConn{
		c: c, rc: rc, port: uint16(o.port), mmsg: o.mmsg,
		shdrs: make([]unix.Mmsghdr, batch), siov: make([]unix.Iovec, 2*batch),
		snames: make([]unix.RawSockaddrInet4, batch),
		rhdrs:  make([]unix.Mmsghdr, len(rbufs)), riov: make([]unix.Iovec, len(rbufs)),
		rnames: make([]unix.RawSockaddrInet4, len(rbufs)), rbufs: rbufs,
	}
	for i := range u.shdrs {
		u.shdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&u.snames[i]))
		u.shdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
		u.shdrs[i].Hdr.Iov = &u.siov[2*i]
		u.shdrs[i].Hdr.SetIovlen(1)
		u.snames[i].Family = unix.AF_INET
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&u.snames[i].Port))[:], u.port)
	}
	for i := range u.rhdrs {
		u.riov[i].Base = &rbufs[i][0]
		u.riov[i].SetLen(len(rbufs[i]))
		u.rhdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&u.rnames[i]))
		u.rhdrs[i].Hdr.Iov = &u.riov[i]
		u.rhdrs[i].Hdr.SetIovlen(1)
	}
	u.sendFn, u.recvFn = u.doSend, u.doRecv
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

// stage puts pkt, for the host at ip (big-endian), into send slot i.
func (u *udpConn) stage(i int, pkt []byte, ip uint32) {
	u.siov[2*i].Base = &pkt[0]
	u.siov[2*i].SetLen(len(pkt))
	u.shdrs[i].Hdr.SetIovlen(1)
	binary.BigEndian.PutUint32(u.snames[i].Addr[:], ip)
}

// stage2 puts a datagram made of hdr and payload into send slot i.
func (u *udpConn) stage2(i int, hdr, payload []byte, ip uint32) {
	u.siov[2*i].Base = &hdr[0]
	u.siov[2*i].SetLen(len(hdr))
	u.siov[2*i+1].Base = &payload[0]
	u.siov[2*i+1].SetLen(len(payload))
	u.shdrs[i].Hdr.SetIovlen(2)
	binary.BigEndian.PutUint32(u.snames[i].Addr[:], ip)
}

// send sends slots [0, n). It returns how many failed and the first error.
func (u *udpConn) send(n int) (failed int, err error) {
	u.sn, u.sdone, u.sfail, u.serr = n, 0, 0, nil
	if werr := u.rc.Write(u.sendFn); werr != nil {
		return n - u.sdone + u.sfail, werr
	}
	return u.sfail, u.serr
}

func (u *udpConn) doSend(fd uintptr) bool {
	for u.sdone < u.sn {
		var r uintptr
		var e syscall.Errno
		if u.mmsg {
			r, _, e = unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&u.shdrs[u.sdone])),
				uintptr(u.sn-u.sdone), unix.MSG_DONTWAIT, 0, 0)
		} else {
			h := &u.shdrs[u.sdone].Hdr
			_, _, e = unix.Syscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(h)), unix.MSG_DONTWAIT)
			r = 1
		}
		switch e {
		case 0:
			u.sdone += int(r)
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		case unix.ENOSYS:
			if !u.mmsg {
				u.serr = fmt.Errorf("sendmsg: %w", e)
				u.sfail += u.sn - u.sdone
				return true
			}
			u.mmsg = false // probed the hard way: fall back for good
		default:
			// The first datagram of the rest failed: skip it, keep the others.
			if u.serr == nil {
				u.serr = fmt.Errorf("send to %v: %w", net.IP(u.snames[u.sdone].Addr[:]), e)
			}
			u.sfail++
			u.sdone++
		}
	}
	return true
}

// recv receives up to len(rbufs) datagrams, waiting for the first. Datagram i is
// rbufs[i][:u.size(i)] from u.src(i).
func (u *udpConn) recv() (int, error) {
	u.rn, u.rerr = 0, nil
	if err := u.rc.Read(u.recvFn); err != nil {
		return 0, err
	}
	return u.rn, u.rerr
}

func (u *udpConn) doRecv(fd uintptr) bool {
	for {
		var r uintptr
		var e syscall.Errno
		if u.mmsg {
			for i := range u.rhdrs {
				u.rhdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
				u.rhdrs[i].Hdr.Flags = 0
			}
			r, _, e = unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&u.rhdrs[0])),
				uintptr(len(u.rhdrs)), unix.MSG_DONTWAIT, 0, 0)
		} else {
			r, e = u.recvEach(fd)
		}
		switch e {
		case 0:
			u.rn = int(r)
			return true
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		case unix.ENOSYS:
			if !u.mmsg {
				u.rerr = fmt.Errorf("recvmsg: %w", e)
				return true
			}
			u.mmsg = false
		default:
			u.rerr = fmt.Errorf("recv: %w", e)
			return true
		}
	}
}

// recvEach is the fallback without recvmmsg: recvmsg until the socket is empty.
func (u *udpConn) recvEach(fd uintptr) (uintptr, syscall.Errno) {
	n := 0
	for n < len(u.rhdrs) {
		h := &u.rhdrs[n]
		h.Hdr.Namelen = unix.SizeofSockaddrInet4
		h.Hdr.Flags = 0
		r, _, e := unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&h.Hdr)), unix.MSG_DONTWAIT)
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

func (u *udpConn) size(i int) int { return int(u.rhdrs[i].Len) }

func (u *udpConn) src(i int) uint32 { return binary.BigEndian.Uint32(u.rnames[i].Addr[:]) }

func (u *udpConn) close() error {
	if err := u.c.Close(); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}
