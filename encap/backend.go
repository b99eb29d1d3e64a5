// Package encap holds what every backend shares and nothing of any one backend: the
// Backend interface, the external interface and the shared errors (backend.go), the
// capabilities a backend may have beside Backend (capabilities.go), the Report a
// Reporter gives and its /stats JSON (report.go), the devices a backend makes as
// cleanup finds them (device.go), the address families of the overlay
// and the peer key (family.go), and the strict reading of the Backend options
// (options.go).
//
// The backends carry traffic to the other hosts' subnets, one package each: udp (a
// userspace data path, see proxy/), vxlan and host-gw (kernel data paths programmed
// via netlink, sharing encap/kernel), wireguard, extension (commands) and alloc (no
// data path). encap/factory builds the one a network config names.
package encap

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"

	"github.com/weftnet/weft/lease"
)

// ErrUnknownBackend is returned for a Backend.Type weft does not know.
var ErrUnknownBackend = errors.New("unknown backend type")

// ErrBadOption is wrapped by errors about the Backend options of the network config.
var ErrBadOption = errors.New("bad backend option")

// ExternalInterface is the underlay interface traffic leaves by.
type ExternalInterface struct {
	Name     string
	Index    int
	MTU      int
	IfaceIP  netip.Addr // address of the interface
	PublicIP netip.Addr // address peers send to (--public-ip, else IfaceIP); 0.0.0.0 on an IPv6-only network
	// The IPv6 counterparts, set when the network has IPv6 (EnableIPv6).
	IfaceIPv6  netip.Addr // IPv6 address of the interface
	PublicIPv6 netip.Addr // address peers send to over IPv6 (--public-ipv6, else IfaceIPv6)
}

// Backend carries traffic to the subnets of other hosts. The daemon calls, in order:
// Attrs (before acquiring a lease), Register (once the lease is held), HandleEvents
// with the first batch of the other hosts' leases if it comes within a second, then
// Run in a goroutine while it passes lease events to HandleEvents, and Close at the
// end.
type Backend interface {
	// Type is the BackendType published in leases ("udp", "vxlan", "host-gw",
	// "wireguard", "extension", "alloc").
	Type() string
	// BackendData is the BackendData published in our lease (may be nil).
	BackendData(ctx context.Context) (json.RawMessage, error)
	// Register configures the local data path for our lease: devices, addresses, routes.
	// It may be called again with a new lease if ours changes.
	Register(ctx context.Context, own lease.Lease) error
	// MTU is the MTU pods should use (written as FLANNEL_MTU); valid after BackendData.
	MTU() int
	// HandleEvents applies changes to the other hosts' leases. It must not block for
	// long; incompatible leases are ignored (see lease.CompatibleWith).
	HandleEvents(ctx context.Context, events []lease.Event)
	// Run runs the data path and periodic work until ctx ends.
	Run(ctx context.Context) error
	// Close releases what the backend holds and leaves its data path in place for the
	// next weftd, which takes it over: vxlan, host-gw and the kernel's WireGuard keep
	// forwarding in the kernel; udp and userspace WireGuard leave their device (a
	// persistent TUN, with its addresses and routes) without a process reading it.
	// `weftd cleanup` removes them.
	Close() error
}
