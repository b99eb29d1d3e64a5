package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/lease"
)

// --ip-blackhole-route: as flanneld, a blackhole route in the main table for our
// subnet of each family the lease has, so a packet to an address of our subnet that
// no pod holds is dropped here instead of leaving by the default route. The CNI
// bridge's route for the subnet (cni0), where there is one, is the same prefix and
// wins; the blackhole route matters where pods get host routes (Canal's /32s).
// flanneld checks it every --iptables-resync seconds and so does weftd, which also
// writes it before subnet.env and moves it when the lease changes. Like the firewall
// rules it outlives weftd; `weftd cleanup` removes it.

// blackholeFamily is the netlink family of p.
func blackholeFamily(p netip.Prefix) int {
	if p.Addr().Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// blackholeRoutes lists the blackhole routes for exactly p in the main table.
func blackholeRoutes(nl *netlink.Handle, p netip.Prefix) ([]netlink.Route, error) {
	p = p.Masked()
	filter := &netlink.Route{Dst: prefixNet(p), Type: unix.RTN_BLACKHOLE}
	rs, err := nl.RouteListFiltered(blackholeFamily(p), filter, netlink.RT_FILTER_DST|netlink.RT_FILTER_TYPE)
	if err != nil {
		return nil, fmt.Errorf("list blackhole routes for %s: %w", p, err)
	}
	return rs, nil
}

// ensureBlackhole adds the blackhole route for p unless it is there. It reports
// whether it added it.
func ensureBlackhole(nl *netlink.Handle, p netip.Prefix) (bool, error) {
	p = p.Masked()
	rs, err := blackholeRoutes(nl, p)
	if err != nil || len(rs) > 0 {
		return false, err
	}
	r := &netlink.Route{Dst: prefixNet(p), Type: unix.RTN_BLACKHOLE, Family: blackholeFamily(p)}
	if err := nl.RouteAdd(r); err != nil {
		return false, fmt.Errorf("add blackhole route %s: %w", p, err)
	}
	return true, nil
}

// removeBlackhole deletes the blackhole routes for p (and no other route to p, such
// as the CNI bridge's). It reports how many it deleted.
func removeBlackhole(nl *netlink.Handle, p netip.Prefix) (int, error) {
	rs, err := blackholeRoutes(nl, p)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, r := range rs {
		if err := nl.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete blackhole route %s: %w", p.Masked(), err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// leasePrefixes are the valid subnets of l (IPv4, IPv6 or both).
func leasePrefixes(l lease.Lease) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []netip.Prefix{l.Subnet, l.IPv6Subnet} {
		if p.IsValid() {
			out = append(out, p.Masked())
		}
	}
	return out
}

// blackholer keeps --ip-blackhole-route's routes for the lease held.
type blackholer struct {
	nl     *netlink.Handle
	log    *zap.Logger
	failed map[netip.Prefix]string // the last error logged for a prefix: logged once
}

// ensure writes the route for each subnet of own. A failure is logged when it first
// happens (flanneld logs it every resync) and not returned: like flanneld, weftd runs
// on without the route, and tries again at the next resync.
func (b *blackholer) ensure(own lease.Lease) {
	for _, p := range leasePrefixes(own) {
		added, err := ensureBlackhole(b.nl, p)
		switch {
		case err != nil:
			if b.failed[p] != err.Error() {
				b.log.Warn("cannot set up the blackhole route (--ip-blackhole-route); retrying every --iptables-resync",
					zap.Stringer("subnet", p), zap.Error(err))
				b.failed[p] = err.Error()
			}
		case added:
			delete(b.failed, p)
			b.log.Info("added blackhole route", zap.Stringer("subnet", p))
		default:
			delete(b.failed, p)
		}
	}
}

// move removes the routes of old's subnets that next does not have, and writes next's.
func (b *blackholer) move(old, next lease.Lease) {
	keep := map[netip.Prefix]bool{}
	for _, p := range leasePrefixes(next) {
		keep[p] = true
	}
	for _, p := range leasePrefixes(old) {
		if keep[p] {
			continue
		}
		if n, err := removeBlackhole(b.nl, p); err != nil {
			b.log.Warn("cannot remove the blackhole route of our old subnet", zap.Stringer("subnet", p), zap.Error(err))
		} else if n > 0 {
			b.log.Info("removed blackhole route", zap.Stringer("subnet", p))
		}
	}
	b.ensure(next)
}

// startBlackholes writes the blackhole routes for own when --ip-blackhole-route is
// set and keeps them every --iptables-resync seconds for the lease held (d.held)
// until ctx ends.
func (d *daemon) startBlackholes(ctx context.Context, own lease.Lease) error {
	if !d.cfg.BlackholeRoute {
		return nil
	}
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE) // routes and links only: no XFRM or netfilter socket
	if err != nil {
		return fmt.Errorf("--ip-blackhole-route: netlink: %w", err)
	}
	b := &blackholer{nl: nl, log: d.log, failed: map[netip.Prefix]string{}}
	b.ensure(own)
	d.blackholes = b
	d.spawn(func() {
		defer nl.Close()
		t := time.NewTicker(d.cfg.Resync)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			d.blackholeMu.Lock()
			if l := d.held.Load(); l != nil {
				b.ensure(*l)
			}
			d.blackholeMu.Unlock()
		}
	})
	return nil
}

// moveBlackholes follows a change of our lease (--ip-blackhole-route).
func (d *daemon) moveBlackholes(old, next lease.Lease) {
	if d.blackholes == nil {
		return
	}
	d.blackholeMu.Lock()
	defer d.blackholeMu.Unlock()
	d.blackholes.move(old, next)
}

// removeBlackholes is `weftd cleanup`'s part: the blackhole routes for the subnets of
// subnet.env (weftd's or flanneld's --ip-blackhole-route).
func removeBlackholes(nl *netlink.Handle, env lease.SubnetEnv, log *zap.Logger) error {
	var errs []error
	for _, p := range []netip.Prefix{env.Subnet, env.IPv6Subnet} {
		if !p.IsValid() {
			continue
		}
		n, err := removeBlackhole(nl, p)
		if err != nil {
			errs = append(errs, err)
		}
		if n > 0 {
			log.Info("removed blackhole route", zap.Stringer("subnet", p.Masked()))
		}
	}
	return errors.Join(errs...)
}
