// Package hostgw holds the host-gw backend: a route to each peer's subnet via the
// peer's public address, for hosts on one L2 segment. Its reconcile loop is
// encap/kernel's.
package hostgw

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/kernel"
	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/lease"
)

// backend routes each peer's subnet via the peer's PublicIP on the external interface.
// It works only between hosts on one L2 segment; a peer elsewhere is reported, never
// given a route that would black-hole its traffic.
type backend struct {
	k   *kernel.Peers
	cfg *lease.Config
}

// New returns the host-gw backend.
func New(cfg *lease.Config, ext encap.ExternalInterface, log *zap.Logger) (encap.Backend, error) {
	if err := checkOptions(cfg.Backend); err != nil {
		return nil, err
	}
	h := &backend{cfg: cfg}
	k, err := kernel.New("host-gw", cfg, ext, kernel.Passes{Full: h.reconcile, Apply: h.apply}, log)
	if err != nil {
		return nil, err
	}
	h.k = k
	return h, nil
}

func (h *backend) Type() string                                         { return "host-gw" }
func (h *backend) BackendData(context.Context) (json.RawMessage, error) { return nil, nil }
func (h *backend) MTU() int                                             { return h.k.External().MTU }
func (h *backend) Close() error                                         { return h.k.Close() }

func (h *backend) Register(_ context.Context, own lease.Lease) error {
	h.k.SetOwn(own)
	return nil
}

func (h *backend) HandleEvents(_ context.Context, events []lease.Event) { h.k.Handle(events) }

// Run makes the kernel match the peers until ctx ends (kernel.Peers.Run).
func (h *backend) Run(ctx context.Context) error { return h.k.Run(ctx) }

// SetExternal moves the routes onto ext (kernel.Peers.SetExternal).
func (h *backend) SetExternal(ext encap.ExternalInterface) { h.k.SetExternal(ext) }

// Kernel is the backend's share of encap/kernel: the peers and the loop that
// programs them (encap/kernel's tests drive it through here).
func (h *backend) Kernel() *kernel.Peers { return h.k }

// Report returns the peers the backend routes, its repairs and its counters.
func (h *backend) Report() encap.Report { return h.k.Report() }

// RepairKinds are the kernel objects the loop puts back: the peers' routes (host-gw
// has no device, neighbour or fdb entry of its own).
func (h *backend) RepairKinds() []string { return []string{"route"} }

// Paths lists a path per peer and family: host-gw has no tunnel, so a prober pings the
// peer's public address, the gateway of the route to its subnet.
func (h *backend) Paths() []encap.Path {
	mtu := h.k.External().MTU
	return h.k.Paths(func(f encap.Family, l lease.Lease, _ netip.Prefix) (encap.Path, bool) {
		sn, pub := f.Subnet(l), f.PublicIP(l)
		if !f.Fits(sn) || !pub.IsValid() {
			return encap.Path{}, false
		}
		return encap.Path{Backend: "host-gw", Subnet: sn, PublicIP: pub, MTU: mtu}, true
	})
}

// SetRouteMTU sets the MTU of the route to a peer's subnet (kernel.Peers.SetRouteMTU).
func (h *backend) SetRouteMTU(sn netip.Prefix, mtu int) error { return h.k.SetRouteMTU(sn, mtu) }

// reconcile routes each family the config enables.
func (h *backend) reconcile() error {
	var errs []error
	for _, f := range encap.Families(h.cfg) {
		errs = append(errs, h.reconcileIn(f))
	}
	return errors.Join(errs...)
}

// reconcileIn routes each peer's subnet of family f via its public address of f.
func (h *backend) reconcileIn(f encap.Family) error {
	peers, synced, _ := h.k.Snapshot()
	own := h.k.OwnSubnet(f)
	want := map[netip.Prefix]netlink.Route{}
	applied := make(map[netip.Prefix]kernel.Entries, len(peers))
	for _, p := range peers {
		if r, ok := h.want(f, p); ok {
			sn := f.Subnet(p)
			want[sn], applied[encap.PeerKey(p)] = r, kernel.Entries{Dst: sn, Link: r.LinkIndex}
		}
	}
	// Recorded first, so that watchKernel takes the stale routes this pass removes
	// for what they are.
	h.k.ResetApplied(f, applied)
	return h.k.SyncRoutes(f, want, []int{h.k.External().Index}, own, synced)
}

// want returns peer p's route of family f; ok is false for a peer without a subnet
// of f, or without a public address of f, or not on a directly connected subnet (the
// last two reported once).
func (h *backend) want(f encap.Family, p lease.Lease) (netlink.Route, bool) {
	sn, pub := f.Subnet(p), f.PublicIP(p)
	if !f.Fits(sn) {
		return netlink.Route{}, false
	}
	if !pub.IsValid() {
		if h.k.Once(sn, true, "host-gw cannot reach a peer: its lease has no public address of the subnet's family",
			zap.Stringer("peer-subnet", sn), zap.Stringer("peer", p.Attrs.PublicIP)) {
			h.k.Count("unreachable_peers")
		}
		return netlink.Route{}, false
	}
	ok, why := h.k.DirectlyConnected(pub)
	if !ok {
		if h.k.Once(sn, true, "host-gw cannot reach a peer: it is not on a directly connected subnet; use vxlan or udp for it",
			zap.Stringer("peer", pub), zap.Stringer("peer-subnet", sn),
			zap.Stringer("us", f.ExtPublicIP(h.k.External())), zap.String("why", why)) {
			h.k.Count("unreachable_peers")
		}
		return netlink.Route{}, false
	}
	h.k.Once(sn, false, "host-gw route to peer", zap.Stringer("peer", pub),
		zap.Stringer("peer-subnet", sn), zap.String("why", why))
	return netlink.Route{Dst: ipconv.IPNet(sn), Gw: net.IP(pub.AsSlice()), LinkIndex: h.k.External().Index,
		MTU: h.k.RouteMTU(sn)}, true
}

// apply writes or removes the changed peers' routes alone, in each family, without
// listing.
func (h *backend) apply(changed []netip.Prefix) error {
	var errs []error
	cs := h.k.Changes(changed)
	for _, f := range encap.Families(h.cfg) {
		for _, c := range cs {
			old := c.Old[f.Index()]
			if c.OK {
				if r, ok := h.want(f, c.Lease); ok {
					dst := kernel.RouteKey(r)
					errs = append(errs, h.k.ReplaceRoute(f, r))
					h.k.SetApplied(c.Key, f, kernel.Entries{Dst: dst, Link: r.LinkIndex})
					if old.Dst.IsValid() && old.Dst != dst && !h.k.Claimed(old.Dst, c.Key) {
						errs = append(errs, h.k.DeleteRoute(f, old.Dst, old.Link))
					}
					continue
				}
			}
			if old.Dst.IsValid() {
				h.k.SetApplied(c.Key, f, kernel.Entries{})
				if !h.k.Claimed(old.Dst, c.Key) {
					errs = append(errs, h.k.DeleteRoute(f, old.Dst, old.Link))
				}
			}
		}
	}
	return errors.Join(errs...)
}

var (
	_ encap.PathLister       = (*backend)(nil)
	_ encap.RouteMTUSetter   = (*backend)(nil)
	_ encap.RepairKindLister = (*backend)(nil)
)
