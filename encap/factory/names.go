package factory

import "github.com/weftnet/weft/encap/wireguard"

// What weftd names of the wireguard backend before it runs (its WEFT_WG_* and
// WIREGUARD_KEY_FILE variables) and after (--cleanup removes its devices), given
// here so that weftd imports no backend package.
const (
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
