package kernel

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/internal/ipconv"
)

// RouteMTUs is a backend's record of the route MTUs path repair asked for
// (encap.RouteMTUSetter), by peer subnet: the one place every backend keeps them. The
// kernel backends write them into each route their passes make (Peers); the backends
// whose device routes the whole network (udp, wireguard) give a recorded subnet a
// route of its own on the device (SetOn) and write those again when the device is
// made again (ApplyOn). The zero value is empty and ready; Get takes no lock (GET
// /peers reads it for every peer).
type RouteMTUs struct {
	mu sync.Mutex // orders the writers; each publishes a new map
	m  atomic.Pointer[map[netip.Prefix]int]
}

// Get is the MTU recorded for sn (0: none, the device's).
func (r *RouteMTUs) Get(sn netip.Prefix) int {
	if m := r.m.Load(); m != nil {
		return (*m)[sn]
	}
	return 0
}

// Len is how many subnets have an MTU recorded.
func (r *RouteMTUs) Len() int {
	if m := r.m.Load(); m != nil {
		return len(*m)
	}
	return 0
}

// Record records mtu for sn (0 forgets sn); a negative mtu is an error
// (encap.ErrBadOption).
func (r *RouteMTUs) Record(sn netip.Prefix, mtu int) error {
	if mtu < 0 {
		return fmt.Errorf("route MTU %d for %v: %w", mtu, sn, encap.ErrBadOption)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recordLocked(sn, mtu)
	return nil
}

func (r *RouteMTUs) recordLocked(sn netip.Prefix, mtu int) {
	next := map[netip.Prefix]int{}
	if m := r.m.Load(); m != nil {
		next = maps.Clone(*m)
	}
	if mtu > 0 {
		next[sn] = mtu
	} else {
		delete(next, sn)
	}
	r.m.Store(&next)
}

// SetOn gives sn a route of its own on link with mtu (0 removes that route) and
// records it: for a device that routes the whole network, the more specific route
// carries the peer's MTU.
func (r *RouteMTUs) SetOn(link int, sn netip.Prefix, mtu int) error {
	if mtu < 0 {
		return fmt.Errorf("route MTU %d for %v: %w", mtu, sn, encap.ErrBadOption)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := SetLinkRouteMTU(link, sn, mtu); err != nil {
		return err
	}
	r.recordLocked(sn, mtu)
	return nil
}

// ApplyOn writes the route of every recorded subnet of the family of network (the
// device's network) on link again: after the device was made again, which took
// them with it.
func (r *RouteMTUs) ApplyOn(link int, network netip.Prefix) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.m.Load()
	if m == nil {
		return nil
	}
	var errs []error
	for sn, mtu := range *m {
		if sn.Addr().Is4() == network.Addr().Is4() && network.Overlaps(sn) {
			errs = append(errs, SetLinkRouteMTU(link, sn, mtu))
		}
	}
	return errors.Join(errs...)
}

// ClearOn removes the route of its own that SetOn gave each recorded subnet on link,
// and forgets them all: a device that outlives weftd (udp's flannel0, wireguard's
// device) keeps its network's route, but not the MTUs this process chose.
func (r *RouteMTUs) ClearOn(link int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.m.Load()
	if m == nil {
		return nil
	}
	empty := map[netip.Prefix]int{}
	r.m.Store(&empty)
	var errs []error
	for sn := range *m {
		errs = append(errs, SetLinkRouteMTU(link, sn, 0))
	}
	return errors.Join(errs...)
}

// Reset writes every route to a recorded subnet that still carries its recorded MTU
// again without it, through nl, and forgets them all: weftd stopping leaves the
// kernel backends' routes in place (as flanneld does) but not the MTUs it chose.
func (r *RouteMTUs) Reset(nl *netlink.Handle) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.m.Load()
	if m == nil {
		return nil
	}
	empty := map[netip.Prefix]int{}
	r.m.Store(&empty) // first: a pass from now on writes no MTU
	var errs []error
	for sn, mtu := range *m {
		fam := netlink.FAMILY_V4
		if sn.Addr().Is6() {
			fam = netlink.FAMILY_V6
		}
		routes, err := nl.RouteListFiltered(fam, &netlink.Route{Dst: ipconv.IPNet(sn)}, netlink.RT_FILTER_DST)
		if err != nil {
			errs = append(errs, fmt.Errorf("routes to %v: %w", sn, err))
			continue
		}
		for _, rt := range routes {
			if rt.MTU != mtu {
				continue
			}
			rt.MTU = 0
			if err := nl.RouteReplace(&rt); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("route %v without mtu %d: %w", sn, mtu, err))
			}
		}
	}
	return errors.Join(errs...)
}
