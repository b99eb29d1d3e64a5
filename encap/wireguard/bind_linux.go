package wireguard

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.zx2c4.com/wireguard/conn"
)

// nsBind is a wireguard-go Bind that opens its sockets in the network namespace it
// was made in, whichever goroutine asks: wireguard-go rebinds from its TUN event
// reader and its UAPI handler, goroutines whose threads are in the process's first
// namespace. weftd has one namespace, but a process that runs hosts in namespaces of
// their own (weft's tests run two in one) would get sockets where those threads
// are, and the device would send nothing to its peers.
type nsBind struct {
	conn.Bind
	ns netns.NsHandle
}

// newNSBind wraps b to open in the calling thread's namespace. The caller runs on
// its locked thread, in the namespace the device is for (weftd's: its own).
func newNSBind(b conn.Bind) (*nsBind, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("network namespace: %w", err)
	}
	return &nsBind{Bind: b, ns: ns}, nil
}

// Open opens the sockets in b's namespace.
func (b *nsBind) Open(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	runtime.LockOSThread()
	cur, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, 0, fmt.Errorf("network namespace: %w", err)
	}
	defer cur.Close()
	if cur.Equal(b.ns) {
		runtime.UnlockOSThread()
		return b.Bind.Open(port)
	}
	if err := netns.Set(b.ns); err != nil {
		runtime.UnlockOSThread()
		return nil, 0, fmt.Errorf("enter the device's network namespace: %w", err)
	}
	fns, actual, err := b.Bind.Open(port)
	if rerr := netns.Set(cur); rerr == nil {
		runtime.UnlockOSThread()
	} // else the thread stays locked, and dies with its goroutine: it is in another namespace
	return fns, actual, err
}

// release closes the namespace handle (after the device is closed).
func (b *nsBind) release() { _ = b.ns.Close() }
