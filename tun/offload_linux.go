package tun

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// tun offload flags (linux/if_tun.h).
const (
	tunFCsum = 0x01
	tunFTSO4 = 0x02
	tunFTSO6 = 0x04
	// UDP segmentation offload, kernel 6.2 and later; the kernel takes the two only
	// together (the data path sees IPv4 alone).
	tunFUSO4 = 0x20
	tunFUSO6 = 0x40
)

// openOffloadQueue opens a queue with IFF_VNET_HDR and asks the kernel for checksum
// and TCP segmentation offload (TSO4 and TSO6): reads then return up to 64 KiB TCP segments with a
// virtio-net header in front. With uso it also asks for UDPv4 segmentation offload
// (TUN_F_USO4), so that writes may carry many UDP datagrams of one flow as one
// packet (and reads may return such packets); a kernel that refuses it (before 6.2)
// gets the queue without it. water cannot set IFF_VNET_HDR, so this path opens
// /dev/net/tun itself.
func openOffloadQueue(name string, mq, uso bool) (*Queue, error) {
	fd, err := OpenVnetFD(name, mq)
	if err != nil {
		return nil, err
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, VnetHdrLen); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tun %s: TUNSETVNETHDRSZ: %w", name, err)
	}
	const tso = tunFCsum | tunFTSO4 | tunFTSO6
	uso = uso && unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tso|tunFUSO4|tunFUSO6) == nil
	if !uso {
		if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tso); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("tun %s: TUNSETOFFLOAD: %w", name, err)
		}
	}
	q, err := newQueue(name, os.NewFile(uintptr(fd), "/dev/net/tun"))
	if err != nil {
		return nil, err
	}
	q.vnet, q.uso = true, uso
	return q, nil
}

// OpenVnetFD opens a queue of the TUN device name, making the device when there is
// none, with the virtio-net header (IFF_VNET_HDR), multi-queue when mq, and
// non-blocking; the caller owns the descriptor. A device that exists with other
// flags (single-queue where mq asks for more) is an error wrapping unix.EINVAL.
func OpenVnetFD(name string, mq bool) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("tun %s: open /dev/net/tun: %w", name, err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("tun %s: ifreq: %w", name, err)
	}
	flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if mq {
		flags |= unix.IFF_MULTI_QUEUE
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("tun %s: TUNSETIFF (vnet header): %w", name, err)
	}
	return fd, nil
}

// VnetHdr reports whether the queue's packets carry a virtio-net header: Read puts it
// in the VnetHdrLen bytes before offset, Write takes it from there.
func (q *Queue) VnetHdr() bool { return q.vnet }

// USO reports whether the queue has UDP segmentation offload: packets in both
// directions may be UDPv4 super packets (virtio-net GSO type UDP_L4).
func (q *Queue) USO() bool { return q.uso }
