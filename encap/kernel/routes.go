package kernel

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/internal/ipconv"
)

// DirectlyConnected reports whether ip is on a subnet connected to the external
// interface (the kernel would reach it without a gateway).
func (k *Peers) DirectlyConnected(ip netip.Addr) (bool, string) {
	routes, err := k.nl.RouteGet(net.IP(ip.AsSlice()))
	if err != nil || len(routes) == 0 {
		return false, fmt.Sprintf("no route to %v", ip)
	}
	r, ext := routes[0], k.External()
	switch {
	case r.Gw != nil:
		return false, fmt.Sprintf("%v is reached via gateway %v", ip, r.Gw)
	case r.LinkIndex != ext.Index:
		return false, fmt.Sprintf("%v is reached on another interface (index %d)", ip, r.LinkIndex)
	}
	return true, fmt.Sprintf("%v is on a subnet connected to %s", ip, ext.Name)
}

// RouteKey identifies a route by destination (either family).
func RouteKey(r netlink.Route) netip.Prefix {
	if r.Dst == nil {
		return netip.Prefix{}
	}
	ip, _ := netip.AddrFromSlice(r.Dst.IP)
	ones, _ := r.Dst.Mask.Size()
	return netip.PrefixFrom(ip.Unmap(), ones)
}

// SyncRoutes makes the overlay routes of family f on the given links match want:
// missing or different ones are replaced; when prune is set, overlay routes of ours
// that are not wanted are deleted.
func (k *Peers) SyncRoutes(f encap.Family, want map[netip.Prefix]netlink.Route, links []int, own netip.Prefix, prune bool) error {
	k.Count("netlink_lists")
	have, err := k.nl.RouteList(nil, f.NL)
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	byDst := map[netip.Prefix]netlink.Route{}
	for _, r := range have {
		if p := RouteKey(r); p.IsValid() && (r.Table == 254 || r.Table == 0) {
			byDst[p] = r
		}
	}
	var firstErr error
	inPlace, written := map[string]bool{}, map[string]bool{}
	for dst, w := range want {
		h, ok := byDst[dst]
		if ok && h.LinkIndex == w.LinkIndex && h.Gw.Equal(w.Gw) && h.Flags&int(netlink.FLAG_ONLINK) == w.Flags&int(netlink.FLAG_ONLINK) && h.MTU == w.MTU {
			inPlace[dst.String()] = true
			continue
		}
		if err := k.nl.RouteReplace(&w); err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("route %v: %w", dst, err)
			}
			continue
		}
		inPlace[dst.String()], written[dst.String()] = true, true
	}
	k.SettleIn(Slot(f, "route"), "route", inPlace, written)
	if !prune {
		return firstErr
	}
	for dst, h := range byDst {
		if _, ok := want[dst]; ok || dst == own || !f.Fits(dst) {
			continue
		}
		for _, l := range links {
			if h.LinkIndex == l {
				if err := k.nl.RouteDel(&h); err != nil && firstErr == nil {
					firstErr = fmt.Errorf("remove stale route %v: %w", dst, err)
				}
				k.log.Info("removed a stale route", zap.Stringer("subnet", dst))
			}
		}
	}
	return firstErr
}

// ReplaceRoute writes one peer's route of family f outside a full pass.
func (k *Peers) ReplaceRoute(f encap.Family, r netlink.Route) error {
	dst := RouteKey(r)
	if err := k.nl.RouteReplace(&r); err != nil {
		return fmt.Errorf("route %v: %w", dst, err)
	}
	k.Placed(Slot(f, "route"), dst.String(), true)
	return nil
}

// DeleteRoute removes one peer's route of family f on link outside a full pass; a
// route already gone is fine.
func (k *Peers) DeleteRoute(f encap.Family, dst netip.Prefix, link int) error {
	k.Placed(Slot(f, "route"), dst.String(), false)
	err := k.nl.RouteDel(&netlink.Route{Dst: ipconv.IPNet(dst), LinkIndex: link})
	if err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove route %v: %w", dst, err)
	}
	return nil
}
