package wireguard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/internal/nlwatch"
)

// wgRepairPeriod is how often Run checks the devices and routes when no netlink event
// asked it to.
const wgRepairPeriod = 10 * time.Second

// Run puts back what the backend made when something else removes it, as the kernel
// backends' reconcile loop does: a device deleted (ip link del) is made again with its
// key, port, address, route and every peer; the network's route on a device is
// routed again. A link or route deletion seen on netlink asks for a pass at once; a
// pass every wgRepairPeriod is the fallback (a subscription that failed or overflowed).
func (w *backend) Run(ctx context.Context) error {
	// A subscription that fails is left out: the period still repairs.
	nw, _ := nlwatch.Subscribe(nlwatch.Options{Links: true, Routes: true,
		OnError: func(err error) { w.log.Debug("netlink watch", zap.Error(err)) }})
	defer nw.Close()
	links, routes := nw.Links, nw.Routes
	t := time.NewTicker(wgRepairPeriod)
	defer t.Stop()
	choose := time.NewTicker(chooseEvery)
	defer choose.Stop()
	firstDue := time.NewTicker(relayFirstTick)
	defer firstDue.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-choose.C:
			w.mu.Lock()
			if w.own.Attrs.Site != "" && w.node != nil && !w.noChoice {
				w.choose(now)
			} else if w.node != nil {
				w.keepSeen(w.status(), now) // a relay without a site: for the hellos it answers
			}
			w.keepRelayed(now)
			w.mu.Unlock()
		case now := <-firstDue.C:
			w.mu.Lock()
			if w.own.Attrs.Site != "" && w.node != nil && !w.noChoice {
				w.relayFirstDue(now)
			}
			w.mu.Unlock()
		case u, ok := <-links:
			if !ok {
				links = nil
			} else if u.Header.Type == unix.RTM_DELLINK && u.Attrs() != nil && w.owns(u.Attrs().Name) {
				w.repair()
			}
		case u, ok := <-routes:
			if !ok {
				routes = nil
			} else if u.Type == unix.RTM_DELROUTE && w.isNetwork(u.Dst) {
				w.repair()
			}
		case <-t.C:
			w.repair()
		}
	}
}

// owns reports whether name is one of the backend's devices.
func (w *backend) owns(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range w.devs {
		if d != nil && d.Name() == name {
			return true
		}
	}
	return false
}

// isNetwork reports whether dst is the network of a family the backend routes.
func (w *backend) isNetwork(dst *net.IPNet) bool {
	if dst == nil {
		return false
	}
	a, ok := netip.AddrFromSlice(dst.IP)
	if !ok {
		return false
	}
	ones, _ := dst.Mask.Size()
	p := netip.PrefixFrom(a.Unmap(), ones)
	for _, f := range []encap.Family{encap.V4(w.cfg), encap.V6(w.cfg)} {
		if f.On() && f.Network == p {
			return true
		}
	}
	return false
}

// repair makes each device again that is gone, and routes each network again whose
// route is gone. Nothing is done before Register or after Close.
func (w *backend) repair() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.own.Subnet.IsValid() && !w.own.IPv6Subnet.IsValid() {
		return
	}
	for i, d := range w.devs {
		if d == nil {
			continue
		}
		_, err := d.Link()
		var nf netlink.LinkNotFoundError
		switch {
		case errors.As(err, &nf):
			w.log.Warn("the WireGuard device is gone; making it again", zap.String("device", d.Name()))
			if err := w.remake(i); err != nil {
				w.log.Error("making the WireGuard device again", zap.String("device", d.Name()), zap.Error(err))
			} else {
				w.repairs["device"]++
			}
		case err != nil:
			w.log.Warn("looking up the WireGuard device", zap.String("device", d.Name()), zap.Error(err))
		default:
			w.routeAgain(i)
		}
	}
}

// remake replaces devs[i], which is gone, by a new device with the same name, key,
// port and peers, its address and its route. w.mu is held.
func (w *backend) remake(i int) error {
	old := w.devs[i]
	if err := old.Close(); err != nil {
		w.log.Debug("closing the deleted device", zap.String("device", old.Name()), zap.Error(err))
	}
	d, err := openWGDevice(old.Name(), w.MTU(), w.device, w.socketDir, w.drops.device(old.Name()), w.log)
	if err != nil {
		return err
	}
	port := w.opts.ListenPort
	if i == 1 {
		port = w.opts.ListenPortV6
	}
	cfg := wgtypes.Config{PrivateKey: &w.priv, ListenPort: &port, ReplacePeers: true}
	for _, key := range slices.SortedFunc(maps.Keys(w.applied), netip.Prefix.Compare) {
		if c := w.applied[key][i]; c != nil {
			cfg.Peers = append(cfg.Peers, w.peerConfig(c))
		}
	}
	if err := d.Configure(cfg); err != nil {
		_ = d.Close()
		return fmt.Errorf("configure: %w", err)
	}
	w.devs[i] = d
	if i == 0 {
		w.relayInProcess()
	}
	var errs []error
	for _, f := range []encap.Family{encap.V4(w.cfg), encap.V6(w.cfg)} {
		if f.On() && w.devFor(f) == i {
			errs = append(errs, w.setUp(f))
			// The routes path repair gave their own MTU went with the old device.
			if link, err := d.Link(); err == nil && w.mtus.Len() > 0 {
				errs = append(errs, w.mtus.ApplyOn(link.Attrs().Index, f.Network))
			}
		}
	}
	w.log.Info("WireGuard device made again", zap.String("device", d.Name()), zap.String("implementation", d.Kind()),
		zap.Int("peers", len(cfg.Peers)))
	return errors.Join(errs...)
}

// routeAgain routes each network devs[i] carries to it again if its route is gone.
// w.mu is held.
func (w *backend) routeAgain(i int) {
	link, err := w.devs[i].Link()
	if err != nil {
		return
	}
	for _, f := range []encap.Family{encap.V4(w.cfg), encap.V6(w.cfg)} {
		if !f.On() || w.devFor(f) != i {
			continue
		}
		have, err := netlink.RouteListFiltered(f.NL, &netlink.Route{LinkIndex: link.Attrs().Index}, netlink.RT_FILTER_OIF)
		if err != nil {
			continue
		}
		if slices.ContainsFunc(have, func(r netlink.Route) bool { return r.Dst != nil && r.Dst.String() == f.Network.String() }) {
			continue
		}
		if err := wgRoute(link, f.Network); err != nil {
			w.log.Warn("routing the network again", zap.Error(err))
			continue
		}
		w.log.Warn("the route to the network was gone; routed it again", zap.Stringer("network", f.Network), zap.String("device", link.Attrs().Name))
		w.repairs["route"]++
	}
}
