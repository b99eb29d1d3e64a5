package encap

import (
	"net/netip"
	"time"
)

// Path is how the backend reaches one peer subnet: what a prober needs to send a
// packet the way pods' packets go, and to name what blocks it.
type Path struct {
	Backend string       // the backend's Type
	Subnet  netip.Prefix // the peer's subnet of one family
	// PublicIP is the peer's underlay address the tunnel's packets go to.
	PublicIP netip.Addr
	// Overlay is an address the peer holds on its end of the tunnel (flannel.<VNI>,
	// flannel0 and flannel-wg hold their subnet's first address, flanneld's as
	// weftd's), and Local ours: a packet from Local to Overlay takes the pods' path.
	// Both are invalid where the backend has no tunnel (host-gw).
	Overlay, Local netip.Addr
	// Endpoint is where the tunnel's packets go (PublicIP and the port), and Proto
	// what carries them, for people: "UDP 8472". Both are empty without a tunnel.
	Endpoint netip.AddrPort
	Proto    string
	// MTU is the largest packet the path should carry (the device's MTU): what a
	// full-size probe sends.
	MTU int
	// RouteMTU is the MTU set on the route to Subnet by SetRouteMTU (0: none).
	RouteMTU int
	// Via is the subnet of the peer that relays to this one (invalid: direct).
	Via netip.Prefix
	// Punched is set on a direct path through NAT that both hosts opened by dialing
	// each other's outside address together.
	Punched bool
	// Why says in one sentence why the backend takes this path and not the one
	// before it ("direct: no answer for 3 rounds"); empty where it has no choice.
	Why string
	// LastHandshake is the tunnel's last handshake with the peer (WireGuard; zero:
	// none, or a tunnel without handshakes).
	LastHandshake time.Time
}
