package kernel

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/internal/nlwatch"
)

// watchKernel asks for a full reconcile pass as soon as the kernel loses something
// the backend put there and still wants: a peer's route, neighbour or fdb entry, the
// backend's device or the external interface. A route or fdb entry deleted by hand (or
// by another program) then comes back at once instead of at the next period, which
// stays as the fallback. The entries weftd removes itself (a peer's lease gone) are no
// longer wanted when their deletion is seen, so they cost nothing. The external
// interface coming up asks for a pass too: routes via a gateway on it fail while it is
// down. A subscription that ends (netlink closes it on a receive error, such as an
// overflow that lost events) is made again after a pause, and a full pass then finds
// whatever the lost events said. When ctx ends it ends the subscriptions and returns
// once netlink's goroutines that fed them have closed their channels.
func (k *Peers) watchKernel(ctx context.Context) {
	if k.watchReturning != nil {
		defer k.watchReturning()
	}
	pause := time.Second
	for {
		t0 := time.Now()
		watched := k.watchOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if watched {
			k.Count("watch_restarts")
			k.repair()
		}
		if time.Since(t0) > time.Minute {
			pause = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Minute)
	}
}

// watchOnce subscribes to routes, neighbours and links and asks for passes (see
// watchKernel) until ctx ends or a subscription ends; watched is false when a
// subscription could not be made.
func (k *Peers) watchOnce(ctx context.Context) (watched bool) {
	w, err := nlwatch.Subscribe(nlwatch.Options{Routes: true, Neighs: true, Links: true, Namespace: k.watchNS,
		OnError: func(err error) { k.log.Debug("netlink watch", zap.Error(err)) }, AllOrNothing: true})
	if err != nil {
		w.Close() // lets go of the subscriptions made before the one that failed
		return false
	}
	defer w.Close()
	for {
		select {
		case <-ctx.Done():
			return true
		case u, ok := <-w.Routes:
			if !ok {
				return true
			}
			if u.Type == unix.RTM_DELROUTE && u.Dst != nil && k.wantsRoute(u.Dst) {
				k.repair()
			}
		case u, ok := <-w.Neighs:
			if !ok {
				return true
			}
			if u.Type == unix.RTM_DELNEIGH && k.wantsNeigh(u.Neigh) {
				k.repair()
			}
		case u, ok := <-w.Links:
			if !ok {
				return true
			}
			if k.linkNeedsPass(u) {
				k.repair()
			}
		}
	}
}

// linkNeedsPass reports whether a link update loses us something (the external
// interface or one of our devices deleted) or lets a pass put it back (the external
// interface set up).
func (k *Peers) linkNeedsPass(u netlink.LinkUpdate) bool {
	a := u.Attrs()
	if a == nil {
		return false
	}
	ext := k.External()
	switch u.Header.Type {
	case unix.RTM_DELLINK:
		return a.Index == ext.Index || slices.Contains(k.devices, a.Name)
	case unix.RTM_NEWLINK:
		return a.Index == ext.Index && u.Change&unix.IFF_UP != 0 && u.Flags&unix.IFF_UP != 0
	}
	return false
}

// wantsRoute reports whether dst is the destination of a peer route (either family)
// we put in place.
func (k *Peers) wantsRoute(dst *net.IPNet) bool {
	a, ok := netip.AddrFromSlice(dst.IP)
	if !ok {
		return false
	}
	ones, _ := dst.Mask.Size()
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok = k.routed[netip.PrefixFrom(a.Unmap(), ones)]
	return ok
}

// wantsNeigh reports whether n is a neighbour entry (its address, either family) or
// an fdb entry (its MAC) we put in place.
func (k *Peers) wantsNeigh(n netlink.Neigh) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if n.Family == unix.AF_BRIDGE {
		if n.HardwareAddr == nil {
			return false
		}
		mac := n.HardwareAddr.String()
		return k.macs[0][mac] > 0 || k.macs[1][mac] > 0
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return false
	}
	a = a.Unmap()
	for _, f := range []encap.Family{encap.V4(k.cfg), encap.V6(k.cfg)} {
		if !f.On() || f.Is6() != a.Is6() || !f.Network.Contains(a) {
			continue
		}
		p, err := a.Prefix(f.Bits)
		if err != nil {
			return false
		}
		key, ok := k.routed[p]
		e := k.applied[key][f.Index()]
		return ok && e.MAC != "" && e.GW == a
	}
	return false
}
