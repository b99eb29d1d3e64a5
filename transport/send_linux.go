package transport

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The sending half of Conn: messages staged (whole, or gathered from pieces, or runs
// of segments for GSO) and sent with one sendmmsg.

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

// StageRunParts is StageRun for a datagram gathered from two pieces, head then body
// (neither copied): a relay frame's header, the same for every datagram to one
// peer, in front of the datagram the device handed over. The caller checks Room(2).
func (u *Conn) StageRunParts(head, body []byte, to netip.AddrPort) error {
	size := len(head) + len(body)
	if u.tx.runOpen && u.tx.gso && u.tx.runTo == to && !u.tx.runFrom.IsValid() && size <= u.tx.runSeg && u.tx.runSegs < MaxSegments &&
		u.tx.runBytes+size <= MaxUDPPayload && u.tx.niov+2 <= len(u.tx.iov) {
		u.tx.n-- // reopen the last message
		u.AddIov(head)
		u.AddIov(body)
		u.tx.runSegs++
		u.tx.runBytes += size
		u.tx.runOpen = size == u.tx.runSeg
		u.End(u.tx.runSegs, u.tx.runSeg)
		return nil
	}
	if err := u.Begin(to); err != nil {
		return err
	}
	u.AddIov(head)
	u.AddIov(body)
	u.End(1, 0)
	u.tx.runOpen, u.tx.runTo, u.tx.runFrom = true, to, Local{}
	u.tx.runSeg, u.tx.runSegs, u.tx.runBytes = size, 1, size
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
