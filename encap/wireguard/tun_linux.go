package wireguard

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"
)

// createTUN opens the TUN device name for wireguard-go, making it if it does not
// exist: with the virtio-net header (offloads) and, where it can, multi-queue, so
// that a new weftd's device attaches a queue of its own beside ours in a hand-over.
// A TUN an older weftd made single-queue is opened as it is (multiQueue false).
func createTUN(name string, mtu int) (t tun.Device, multiQueue bool, err error) {
	for _, mq := range []bool{true, false} {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, false, fmt.Errorf("open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			unix.Close(fd)
			return nil, false, err
		}
		flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
		if mq {
			flags |= unix.IFF_MULTI_QUEUE
		}
		ifr.SetUint16(flags)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			if mq && errors.Is(err, unix.EINVAL) { // single-queue: made so by an older weftd
				continue
			}
			return nil, false, fmt.Errorf("TUNSETIFF %s: %w", name, err)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return nil, false, err
		}
		t, err := tun.CreateTUNFromFile(os.NewFile(uintptr(fd), "/dev/net/tun"), mtu)
		if err != nil {
			return nil, false, err
		}
		return t, mq, nil
	}
	return nil, false, fmt.Errorf("TUNSETIFF %s: %w", name, unix.EINVAL)
}

// gatedTUN holds its reads until open: a device that took over from one still
// running leaves what the kernel queues for it in its queue until it has its peers
// (wireguard-go drops a packet for no peer).
type gatedTUN struct {
	tun.Device
	gate chan struct{}
	once sync.Once
}

func newGatedTUN(t tun.Device) *gatedTUN { return &gatedTUN{Device: t, gate: make(chan struct{})} }

func (g *gatedTUN) open() { g.once.Do(func() { close(g.gate) }) }

func (g *gatedTUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	<-g.gate
	return g.Device.Read(bufs, sizes, offset)
}

func (g *gatedTUN) Close() error {
	g.open()
	return g.Device.Close()
}
