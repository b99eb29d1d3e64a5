package kernel

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/lease"
)

// PathFunc makes the path to peer l in family f, given our subnet of f; false when
// the peer gets none in f.
type PathFunc func(f encap.Family, l lease.Lease, own netip.Prefix) (encap.Path, bool)

// Paths lists the peers' paths, one per peer and family the config enables, as path
// makes them, each with the route MTU SetRouteMTU set.
func (k *Peers) Paths(path PathFunc) []encap.Path {
	fams := encap.Families(k.cfg)
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]encap.Path, 0, len(k.peers)*len(fams))
	for _, l := range k.peers {
		for _, f := range fams {
			own := k.own
			if f.Is6() {
				own = k.own6
			}
			if p, ok := path(f, l, own); ok && p.Subnet.IsValid() {
				p.RouteMTU = k.mtus.Get(p.Subnet)
				out = append(out, p)
			}
		}
	}
	return out
}

// SetRouteMTU records the MTU the route to subnet sn should have (0: none) and writes
// the route again in the next pass: the passes give every route its recorded MTU and
// the full pass puts back one changed under weft.
func (k *Peers) SetRouteMTU(sn netip.Prefix, mtu int) error {
	if err := k.mtus.Record(sn, mtu); err != nil {
		return err
	}
	k.mu.Lock()
	for key, l := range k.peers {
		if l.Subnet == sn || l.IPv6Subnet == sn {
			k.dirty[key] = struct{}{}
		}
	}
	k.mu.Unlock()
	k.poke()
	return nil
}

// RouteMTU is the MTU the route to sn should have (0: the device's).
func (k *Peers) RouteMTU(sn netip.Prefix) int { return k.mtus.Get(sn) }

// SetLinkRouteMTU gives the route to sn on link an MTU of its own: a route more
// specific than the network's, which the device's route covers; mtu 0 removes it.
// For the backends whose device routes the whole network (udp, wireguard).
func SetLinkRouteMTU(link int, sn netip.Prefix, mtu int) error {
	r := netlink.Route{LinkIndex: link, Scope: netlink.SCOPE_LINK, Dst: ipconv.IPNet(sn), MTU: mtu}
	if mtu > 0 {
		if err := netlink.RouteReplace(&r); err != nil {
			return fmt.Errorf("route %v mtu %d: %w", sn, mtu, err)
		}
		return nil
	}
	if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove route %v: %w", sn, err)
	}
	return nil
}
