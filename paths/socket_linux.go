package paths

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// rawSocket is one raw ICMP socket of a family: it sends echoes with DF from a chosen
// source address (IP_PKTINFO), never fragmenting and ignoring the path MTU the kernel
// learnt (IP_PMTUDISC_PROBE: the probe tests the path, not the cache), and reads echo
// replies alone (an ICMP filter).
type rawSocket struct {
	fam int
	c   *net.IPConn
	p4  *ipv4.PacketConn
	p6  *ipv6.PacketConn
}

func listen(fam int) (*rawSocket, error) {
	network, laddr := "ip4:icmp", "0.0.0.0"
	if fam == 1 {
		network, laddr = "ip6:ipv6-icmp", "::"
	}
	pc, err := net.ListenPacket(network, laddr)
	if err != nil {
		return nil, fmt.Errorf("probe socket %s: %w", network, err)
	}
	s := &rawSocket{fam: fam, c: pc.(*net.IPConn)}
	if err := s.setUp(); err != nil {
		pc.Close()
		return nil, fmt.Errorf("probe socket %s: %w", network, err)
	}
	return s, nil
}

func (s *rawSocket) setUp() error {
	if s.fam == 0 {
		s.p4 = ipv4.NewPacketConn(s.c)
		var f ipv4.ICMPFilter
		f.SetAll(true)
		f.Accept(ipv4.ICMPTypeEchoReply)
		if err := s.p4.SetICMPFilter(&f); err != nil {
			return fmt.Errorf("ICMP filter: %w", err)
		}
	} else {
		s.p6 = ipv6.NewPacketConn(s.c)
		var f ipv6.ICMPFilter
		f.SetAll(true)
		f.Accept(ipv6.ICMPTypeEchoReply)
		if err := s.p6.SetICMPFilter(&f); err != nil {
			return fmt.Errorf("ICMP filter: %w", err)
		}
	}
	sc, err := s.c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := sc.Control(func(fd uintptr) {
		if s.fam == 0 {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_PROBE)
		}
		if serr == nil {
			// Room for the answers of a burst of probes; what does not fit is lost
			// and counted as loss, so be generous.
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
		}
		if serr == nil {
			// Room for probes the kernel holds while it resolves a neighbour (a
			// peer gone holds them ~3 s): past the default, sends fail (ENOBUFS).
			// Beyond wmem_max with CAP_NET_ADMIN; else as much as allowed.
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20) != nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("set DF: %w", serr)
	}
	return nil
}

// send sends the ICMP message m from src (invalid: the kernel's choice) to dst.
func (s *rawSocket) send(m []byte, src, dst netip.Addr) error {
	to := &net.IPAddr{IP: dst.AsSlice()}
	var err error
	if s.fam == 0 {
		var cm *ipv4.ControlMessage
		if src.IsValid() {
			cm = &ipv4.ControlMessage{Src: src.AsSlice()}
		}
		_, err = s.p4.WriteTo(m, cm, to)
	} else {
		var cm *ipv6.ControlMessage
		if src.IsValid() {
			cm = &ipv6.ControlMessage{Src: src.AsSlice()}
		}
		_, err = s.p6.WriteTo(m, cm, to)
	}
	return err
}

// recv reads one ICMP message (no IP header) into b.
func (s *rawSocket) recv(b []byte, deadline time.Time) (int, netip.Addr, error) {
	if err := s.c.SetReadDeadline(deadline); err != nil {
		return 0, netip.Addr{}, err
	}
	n, from, err := s.c.ReadFrom(b)
	if err != nil {
		return 0, netip.Addr{}, err
	}
	a, _ := from.(*net.IPAddr)
	if a == nil {
		return n, netip.Addr{}, nil
	}
	ip, _ := netip.AddrFromSlice(a.IP)
	return n, ip.Unmap(), nil
}

func (s *rawSocket) close() error { return s.c.Close() }

func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) }

// noRoom reports whether a send failed for want of room in the kernel's queues: the
// probe was not sent, which says nothing of the path.
func noRoom(err error) bool { return errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) }
