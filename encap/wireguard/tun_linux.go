package wireguard

import (
	"errors"
	"os"
	"sync"

	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"

	weftun "github.com/weftnet/weft/tun"
)

// createTUN opens the TUN device name for wireguard-go, making it if it does not
// exist: with the virtio-net header (offloads) and, where it can, multi-queue, so
// that a new weftd's device attaches a queue of its own beside ours in a hand-over.
// A TUN an older weftd made single-queue is opened as it is (multiQueue false).
func createTUN(name string, mtu int) (t tun.Device, multiQueue bool, err error) {
	multiQueue = true
	fd, err := weftun.OpenVnetFD(name, true)
	if errors.Is(err, unix.EINVAL) { // single-queue: made so by an older weftd
		multiQueue = false
		fd, err = weftun.OpenVnetFD(name, false)
	}
	if err != nil {
		return nil, false, err
	}
	f := os.NewFile(uintptr(fd), "/dev/net/tun")
	t, err = tun.CreateTUNFromFile(f, mtu)
	if err != nil {
		f.Close()
		return nil, false, err
	}
	return t, multiQueue, nil
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
