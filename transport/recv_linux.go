package transport

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The receiving half of Conn: one recvmmsg (or recvmsg per datagram), and each
// message's size, GRO segment size, local address and sender.

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
