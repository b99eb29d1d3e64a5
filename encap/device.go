package encap

import (
	"slices"
	"strings"
)

// Device is a network device a backend makes, as `weftd cleanup` finds it: each
// backend package exports the list of its own (Devices), and encap/factory lists
// them all for the daemon, which knows no backend's names.
type Device struct {
	// Name is the device's name. A backend that numbers its devices (vxlan's VNI)
	// gives the fixed part followed by a placeholder in angle brackets:
	// "flannel.<VNI>" stands for flannel.1, flannel.4096 and so on.
	Name string
	// Types are the link types (netlink's names: "tuntap", "vxlan", "wireguard")
	// the device has under that name; a link of another type is not the backend's.
	Types []string
	// RoutesNetwork says the device routes the whole overlay network: a route of one
	// peer's subnet on it without a gateway is only there for the MTU path repair set,
	// and goes when cleanup leaves the device to flanneld (--firewall-only resets
	// other routes' MTU instead).
	RoutesNetwork bool
}

// Match says whether a link of that name and link type is d.
func (d Device) Match(name, typ string) bool {
	if !slices.Contains(d.Types, typ) {
		return false
	}
	if i := strings.IndexByte(d.Name, '<'); i >= 0 && strings.HasSuffix(d.Name, ">") {
		return strings.HasPrefix(name, d.Name[:i])
	}
	return name == d.Name
}
