package encap

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"

	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/lease"
)

// hostGW routes each peer's subnet via the peer's PublicIP on the external interface.
// It works only between hosts on one L2 segment; a peer elsewhere is reported, never
// given a route that would black-hole its traffic.
type hostGW struct {
	*kernelPeers
}

// NewHostGW returns the host-gw backend.
func NewHostGW(cfg *lease.Config, ext ExternalInterface, log *zap.Logger) (Backend, error) {
	var none struct{}
	if err := decodeOptions("host-gw", cfg.Backend, &none); err != nil {
		return nil, err
	}
	k, err := newKernelPeers("host-gw", cfg, ext, log)
	if err != nil {
		return nil, err
	}
	return &hostGW{k}, nil
}

func (h *hostGW) Type() string                                         { return "host-gw" }
func (h *hostGW) BackendData(context.Context) (json.RawMessage, error) { return nil, nil }
func (h *hostGW) MTU() int                                             { return h.ext.MTU }
func (h *hostGW) Close() error                                         { h.nl.Close(); return nil }

func (h *hostGW) Register(_ context.Context, own lease.Lease) error {
	h.setOwn(own.Subnet)
	return nil
}

func (h *hostGW) HandleEvents(_ context.Context, events []lease.Event) { h.handle(events) }

func (h *hostGW) Run(ctx context.Context) error { return h.run(ctx, h.reconcile, h.apply) }

func (h *hostGW) reconcile() error {
	peers, synced, own := h.snapshot()
	want := map[netip.Prefix]netlink.Route{}
	applied := make(map[netip.Prefix]programmed, len(peers))
	for _, p := range peers {
		if r, ok := h.want(p); ok {
			want[p.Subnet], applied[p.Subnet] = r, programmed{link: r.LinkIndex}
		}
	}
	h.resetApplied(applied)
	return h.syncRoutes(want, []int{h.ext.Index}, own, synced)
}

// want returns peer p's route; ok is false for a peer not on a directly connected
// subnet (reported once).
func (h *hostGW) want(p lease.Lease) (netlink.Route, bool) {
	ok, why := h.directlyConnected(p.Attrs.PublicIP)
	if !ok {
		if h.once(p.Subnet, true, "host-gw cannot reach a peer: it is not on a directly connected subnet; use vxlan or udp for it",
			zap.Stringer("peer", p.Attrs.PublicIP), zap.Stringer("peer-subnet", p.Subnet),
			zap.Stringer("us", h.ext.PublicIP), zap.String("why", why)) {
			h.count("unreachable_peers")
		}
		return netlink.Route{}, false
	}
	h.once(p.Subnet, false, "host-gw route to peer", zap.Stringer("peer", p.Attrs.PublicIP),
		zap.Stringer("peer-subnet", p.Subnet), zap.String("why", why))
	return netlink.Route{Dst: ipconv.IPNet(p.Subnet), Gw: net.IP(p.Attrs.PublicIP.AsSlice()), LinkIndex: h.ext.Index}, true
}

// apply writes or removes the changed peers' routes alone, without listing.
func (h *hostGW) apply(changed []netip.Prefix) error {
	var errs []error
	for _, c := range h.changes(changed) {
		if c.ok {
			var r netlink.Route
			if r, c.ok = h.want(c.lease); c.ok {
				errs = append(errs, h.replaceRoute(r))
				h.setApplied(c.subnet, programmed{link: r.LinkIndex}, true)
				continue
			}
		}
		if c.had {
			h.setApplied(c.subnet, programmed{}, false)
			errs = append(errs, h.deleteRoute(c.subnet, c.old.link))
		}
	}
	return errors.Join(errs...)
}
