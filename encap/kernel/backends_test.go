package kernel_test

import (
	"fmt"
	"testing"

	"go.uber.org/zap"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/hostgw"
	"github.com/weftnet/weft/encap/kernel"
	"github.com/weftnet/weft/encap/vxlan"
	"github.com/weftnet/weft/lease"
)

// newBackend makes the kernel backend cfg names: the tests of the shared loop run
// through both of its users.
func newBackend(cfg *lease.Config, ext encap.ExternalInterface, log *zap.Logger) (encap.Backend, error) {
	switch cfg.BackendType {
	case "vxlan":
		return vxlan.New(cfg, ext, log)
	case "host-gw":
		return hostgw.New(cfg, ext, log)
	}
	return nil, fmt.Errorf("%w %q: not a kernel backend", encap.ErrUnknownBackend, cfg.BackendType)
}

// peersOf is the kernel.Peers of a kernel backend (nil for another).
func peersOf(be encap.Backend) *kernel.Peers {
	if k, ok := be.(interface{ Kernel() *kernel.Peers }); ok {
		return k.Kernel()
	}
	return nil
}

// vxlanData is a vxlan lease's BackendData, read here without vxlan's code.
type vxlanData struct {
	VNI     int    `json:"VNI"`
	VtepMAC string `json:"VtepMAC"`
}

// uplinkNS makes a namespace whose eth0 (a netnstest.Uplink) has 192.0.2.10/24.
func uplinkNS(t testing.TB, name string) *netns.NS {
	t.Helper()
	ns := netnstest.New(t, name)
	netnstest.Uplink(t, ns, "eth0", "192.0.2.10/24")
	return ns
}
