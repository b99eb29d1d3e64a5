package factory

import (
	"github.com/weftnet/weft/encap/udp"
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
