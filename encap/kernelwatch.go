package encap

import (
	"context"
	"net"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// watchKernel pokes the reconcile loop as soon as the kernel loses something the
// backend may own: a route into the network, a neighbour entry for an address in it,
// an fdb entry, or a link. A route or fdb entry deleted by hand (or by another
// program) then comes back at once instead of at the next period, which stays as the
// fallback (also when a subscription fails or overflows). Deletions weftd makes
// itself cause one more, idle, reconcile.
func (k *kernelPeers) watchKernel(ctx context.Context) {
	done := make(chan struct{})
	defer close(done)
	onErr := func(err error) { k.log.Debug("netlink watch", zap.Error(err)) }
	routes := make(chan netlink.RouteUpdate, 64)
	neighs := make(chan netlink.NeighUpdate, 64)
	links := make(chan netlink.LinkUpdate, 16)
	if err := netlink.RouteSubscribeWithOptions(routes, done, netlink.RouteSubscribeOptions{ErrorCallback: onErr}); err != nil {
		onErr(err)
		routes = nil
	}
	if err := netlink.NeighSubscribeWithOptions(neighs, done, netlink.NeighSubscribeOptions{ErrorCallback: onErr}); err != nil {
		onErr(err)
		neighs = nil
	}
	if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{ErrorCallback: onErr}); err != nil {
		onErr(err)
		links = nil
	}
	fam4, fam6 := v4(k.cfg), v6(k.cfg)
	inNetwork := func(ip net.IP) bool { return fam4.contains(ip) || fam6.contains(ip) }
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-routes:
			if !ok {
				routes = nil
				continue
			}
			if u.Type == unix.RTM_DELROUTE && u.Dst != nil && inNetwork(u.Dst.IP) {
				k.poke()
			}
		case u, ok := <-neighs:
			if !ok {
				neighs = nil
				continue
			}
			if u.Type == unix.RTM_DELNEIGH && (u.Family == unix.AF_BRIDGE || inNetwork(u.IP)) {
				k.poke()
			}
		case u, ok := <-links:
			if !ok {
				links = nil
				continue
			}
			if u.Header.Type == unix.RTM_DELLINK {
				k.poke()
			}
		}
	}
}
