package factory

import (
	"errors"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/udp"
	"github.com/weftnet/weft/encap/vxlan"
	"github.com/weftnet/weft/encap/wireguard"
)

// What weftd names of the backends: the udp backend's device, and the wireguard
// backend's before it runs (its WEFT_WG_* and WIREGUARD_KEY_FILE variables) and after
// (cleanup removes their devices), given here so that weftd imports no backend package.
const (
	// UDPDevice is the udp backend's TUN device.
	UDPDevice = udp.UDPDevice
	// WireGuardDevice and WireGuardDeviceV6 are the wireguard backend's devices.
	WireGuardDevice   = wireguard.Device
	WireGuardDeviceV6 = wireguard.DeviceV6
	// WireGuardAuto, WireGuardKernel and WireGuardUserspace are the implementations
	// of a WireGuard device (Tuning.WireGuard.Device).
	WireGuardAuto      = wireguard.Auto
	WireGuardKernel    = wireguard.Kernel
	WireGuardUserspace = wireguard.Userspace
	// DefaultWireGuardSocketDir and DefaultWireGuardKeyFile are where the UAPI
	// sockets and the private key go by default.
	DefaultWireGuardSocketDir = wireguard.DefaultSocketDir
	DefaultWireGuardKeyFile   = wireguard.DefaultKeyFile
)

// Devices lists the devices every backend makes, each backend's package's own list
// (its Devices): those `weftd cleanup` removes.
func Devices() []encap.Device {
	return slices.Concat(udp.Devices, vxlan.Devices, wireguard.Devices)
}

// OtherDevices lists the devices of every backend but typ (a network config's
// BackendType, in any case; "" is udp): each backend leaves its devices for the next
// weftd when it stops, so a weftd starting with another backend type removes them.
func OtherDevices(typ string) []encap.Device {
	typ = strings.ToLower(typ)
	if typ == "" {
		typ = "udp"
	}
	var out []encap.Device
	for _, b := range []struct {
		typ  string
		devs []encap.Device
	}{{"udp", udp.Devices}, {"vxlan", vxlan.Devices}, {"wireguard", wireguard.Devices}} {
		if b.typ != typ {
			out = append(out, b.devs...)
		}
	}
	return out
}

// DescribeMetrics sends the descriptions of the metrics of every backend that has
// some of its own (encap.Report.Metrics collects them while it runs): weftd's
// /metrics describes them all before any backend runs.
func DescribeMetrics(ch chan<- *prometheus.Desc) {
	udp.DescribeMetrics(ch)
	wireguard.DescribeMetrics(ch)
}

// Repairers are the types of the backends with a repair loop (encap.RepairKindLister),
// as weft_reconcile_repairs_total's help names them.
var Repairers = []string{"udp", "vxlan", "host-gw", "wireguard"}

// ErrSiteBackend is the error for a site on a backend that cannot publish one (an
// encap.SitePublisher): it names the backend that can.
var ErrSiteBackend = errors.New("sites need the wireguard backend")
