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
func (h *hostGW) MTU() int                                             { return h.external().MTU }
func (h *hostGW) Close() error                                         { h.nl.Close(); return nil }

func (h *hostGW) Register(_ context.Context, own lease.Lease) error {
	h.setOwn(own)
	return nil
}

func (h *hostGW) HandleEvents(_ context.Context, events []lease.Event) { h.handle(events) }

func (h *hostGW) Run(ctx context.Context) error { return h.run(ctx, h.reconcile, h.apply) }

// reconcile routes each family the config enables.
func (h *hostGW) reconcile() error {
	var errs []error
	for _, f := range []family{v4(h.cfg), v6(h.cfg)} {
		if f.on() {
			errs = append(errs, h.reconcileIn(f))
		}
	}
	return errors.Join(errs...)
}

// reconcileIn routes each peer's subnet of family f via its public address of f.
func (h *hostGW) reconcileIn(f family) error {
	peers, synced, _ := h.snapshot()
	own := h.ownSubnet(f)
	want := map[netip.Prefix]netlink.Route{}
	applied := make(map[netip.Prefix]entries, len(peers))
	for _, p := range peers {
		if r, ok := h.want(f, p); ok {
			sn := f.subnet(p)
			want[sn], applied[peerKey(p)] = r, entries{dst: sn, link: r.LinkIndex}
		}
	}
	// Recorded first, so that watchKernel takes the stale routes this pass removes
	// for what they are.
	h.resetApplied(f, applied)
	return h.syncRoutes(f, want, []int{h.external().Index}, own, synced)
}

// want returns peer p's route of family f; ok is false for a peer without a subnet
// of f, or without a public address of f, or not on a directly connected subnet (the
// last two reported once).
func (h *hostGW) want(f family, p lease.Lease) (netlink.Route, bool) {
	sn, pub := f.subnet(p), f.publicIP(p)
	if !f.fits(sn) {
		return netlink.Route{}, false
	}
	if !pub.IsValid() {
		if h.once(sn, true, "host-gw cannot reach a peer: its lease has no public address of the subnet's family",
			zap.Stringer("peer-subnet", sn), zap.Stringer("peer", p.Attrs.PublicIP)) {
			h.count("unreachable_peers")
		}
		return netlink.Route{}, false
	}
	ok, why := h.directlyConnected(pub)
	if !ok {
		if h.once(sn, true, "host-gw cannot reach a peer: it is not on a directly connected subnet; use vxlan or udp for it",
			zap.Stringer("peer", pub), zap.Stringer("peer-subnet", sn),
			zap.Stringer("us", f.extPublicIP(h.external())), zap.String("why", why)) {
			h.count("unreachable_peers")
		}
		return netlink.Route{}, false
	}
	h.once(sn, false, "host-gw route to peer", zap.Stringer("peer", pub),
		zap.Stringer("peer-subnet", sn), zap.String("why", why))
	return netlink.Route{Dst: ipconv.IPNet(sn), Gw: net.IP(pub.AsSlice()), LinkIndex: h.external().Index}, true
}

// apply writes or removes the changed peers' routes alone, in each family, without
// listing.
func (h *hostGW) apply(changed []netip.Prefix) error {
	var errs []error
	cs := h.changes(changed)
	for _, f := range h.families() {
		for _, c := range cs {
			old := c.old[f.idx()]
			if c.ok {
				if r, ok := h.want(f, c.lease); ok {
					dst := routeKey(r)
					errs = append(errs, h.replaceRoute(f, r))
					h.setApplied(c.key, f, entries{dst: dst, link: r.LinkIndex})
					if old.dst.IsValid() && old.dst != dst && !h.claimed(old.dst, c.key) {
						errs = append(errs, h.deleteRoute(f, old.dst, old.link))
					}
					continue
				}
			}
			if old.dst.IsValid() {
				h.setApplied(c.key, f, entries{})
				if !h.claimed(old.dst, c.key) {
					errs = append(errs, h.deleteRoute(f, old.dst, old.link))
				}
			}
		}
	}
	return errors.Join(errs...)
}
