package encap

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"time"

	"github.com/weftnet/weft/lease"
)

// What a backend may do beyond Backend. The daemon asks for each with a type
// assertion; a backend without one simply does not do that. Keep this list short: a
// capability every backend has belongs in Backend.

// IPv6DataPublisher publishes data for the IPv6 overlay: the daemon puts
// BackendV6Data into the lease's BackendV6Data (flanneld's vxlan publishes the VtepMAC
// of flannel-v6.<VNI> there). Call it after BackendData.
//
// Implemented by vxlan and wireguard.
type IPv6DataPublisher interface {
	BackendV6Data(ctx context.Context) (json.RawMessage, error)
}

// ExternalFollower follows the external interface when it changes under the backend:
// deleted and made again (a bond, VLAN or bridge re-created: a new index), or given
// another address. The daemon finds the interface again by name and calls SetExternal
// with what it finds; the backend moves its data path onto it (devices, routes,
// neighbour and fdb entries, sockets) at once, without waiting for its next period.
//
// Implemented by udp, vxlan and host-gw.
type ExternalFollower interface {
	SetExternal(ext ExternalInterface)
}

// LeaseAddressChooser chooses the addresses our lease publishes instead of the
// external interface's PublicIP and PublicIPv6: v4 and v6 replace both.
//
// Implemented by extension (flanneld's extension backend publishes the interface's
// own addresses, not --public-ip's).
type LeaseAddressChooser interface {
	LeaseAddrs() (v4, v6 netip.Addr)
}

// Reporter reports what the backend carries and counts: weftd's /stats and /metrics
// are made from its Report.
//
// Implemented by udp, vxlan, host-gw and wireguard (alloc and extension carry no
// traffic of their own and keep no counters).
type Reporter interface {
	Report() Report
}

// RepairKindLister lists the kinds of object its repair loop puts back ("device",
// "route", "neigh", "fdb"), in the order weftd's weft_reconcile_repairs_total
// reports them: each kind listed is reported, at 0 before its first repair; the
// kinds of Report.Repairs it does not list are not.
//
// Implemented by vxlan (all four), host-gw (route) and wireguard (device, route).
type RepairKindLister interface {
	RepairKinds() []string
}

// SitePublisher publishes our site in our lease: the site (lease.Attrs.Site), our
// address on the site's network (SiteIP) and whether our public address is dead
// from outside (NAT, --behind-nat), so that peers choose how to reach us by
// evidence. Only a backend whose peers can learn a NAT's address from what it sends
// (authenticated packets) has it: the daemon refuses --site on another and ignores
// a site label.
//
// Implemented by wireguard.
type SitePublisher interface {
	PublishSite(attrs *lease.Attrs, site string, ext ExternalInterface, behindNAT bool)
}

// PathLister lists the paths the backend programmed: one per peer subnet (each
// family of a dual-stack peer), what the daemon's prober (package paths) probes.
//
// Implemented by udp, vxlan, host-gw and wireguard (alloc and extension program no
// path of their own).
type PathLister interface {
	Paths() []Path
}

// RouteMTUSetter sets the MTU of the route to one peer's subnet, below the device's
// when the path to that peer carries less (so pods get "fragmentation needed" and TCP
// adapts); mtu 0 gives the route the device's MTU again. The backend keeps the value
// as part of what it wants in the kernel: its repairs keep it, a new lease of the
// peer keeps it.
//
// Implemented by udp, vxlan, host-gw and wireguard.
type RouteMTUSetter interface {
	SetRouteMTU(subnet netip.Prefix, mtu int) error
}

// PeerStateFollower is told when the probes find a peer subnet answering (up: up or
// degraded, from down or on a path probed for the first time) or not (down), for a
// backend that chooses paths by it.
//
// Implemented by wireguard (direct, punched or relayed, on this evidence).
type PeerStateFollower interface {
	PeerState(subnet netip.Prefix, up bool)
}

// FirstRoundFollower is told when the probes have judged their first round on a
// peer subnet's path (answered or not; a changed path starts again): the way in use
// has been probed, which a backend that leaves unanswered ways counts against
// (a way left before then was left on no word of the probes).
//
// Implemented by wireguard.
type FirstRoundFollower interface {
	FirstRound(subnet netip.Prefix)
}

// ProbePaceFollower is told how long a path may wait for its first probe round:
// the probes read the backend's paths again at this pace, which slows as peers grow
// (a round to each peer at most every few seconds to a minute, within the probe
// rate). A backend that leaves a way the probes have not found answering gives the
// way at least this long, so that a working way is not left unprobed.
//
// Implemented by wireguard.
type ProbePaceFollower interface {
	ProbePace(firstRound time.Duration)
}

// OutsideLearner learns where a host that can see ours sees it: our NAT's outside
// address and port, for the daemon to publish in our lease (lease.Attrs.Outside) so
// that peers behind another NAT can dial it. Invalid: nothing learnt, or no NAT on
// the way (the address seen is our own).
//
// Implemented by wireguard.
type OutsideLearner interface {
	Outside() netip.AddrPort
}

// BesideStarter starts its data path beside the one of the weftd it replaces, on the
// same device and port, for a hand-over: the kernel spreads the traffic over both
// (more queues on a multi-queue TUN, more sockets in an SO_REUSEPORT group) until the
// old weftd stops and closes its own. The daemon calls StartBeside with our lease as
// the old weftd wrote it (subnet.env) before it asks the old weftd to stop, and then
// Register as always; what the new queues and sockets receive meanwhile waits there
// for Run.
//
// Implemented by udp (a userspace WireGuard engine hands over the other way round:
// see Lingerer).
type BesideStarter interface {
	StartBeside(ctx context.Context, own lease.Lease) error
}

// Lingerer leaves its data path running after Close when a new weftd takes over, until
// the new one's carries the traffic: two userspace WireGuard engines cannot share
// their sessions, so the old one goes on serving its own sessions while the peers
// handshake with the new one, and stops once none of its sessions is used. The
// daemon calls Linger before Close when it stops for a new weftd; the channel closes
// when what lingered has stopped (at once when nothing does), and weftd exits only
// then.
//
// Implemented by wireguard (its userspace devices).
type Lingerer interface {
	Linger() <-chan struct{}
}

// SocketPasser hands its sockets on in a hand-over, so that what reaches them while
// neither weftd reads waits there for the new one instead of being refused by a port
// nobody holds. On the weftd that stops for a new one, the daemon calls PassSockets
// after Linger and Close: copies of the sockets by name, the caller's to close. On
// the new one it calls TakeSockets with them before Register; a socket the backend
// does not use, or one unlike what it would open, it closes and opens its own.
//
// Implemented by wireguard (its path socket).
type SocketPasser interface {
	PassSockets() map[string]*os.File
	TakeSockets(map[string]*os.File)
}
