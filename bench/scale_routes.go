package bench

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// routeWatch follows, through a netlink subscription inside a host's namespace, the
// routes to subnets of one length in the overlay: the kernel data path of vxlan and
// host-gw. It keeps the set and tells waiters when a subnet's route appears or goes.
type routeWatch struct {
	overlay netip.Prefix
	bits    int
	nsName  string
	done    chan struct{}

	mu      sync.Mutex
	routes  map[netip.Prefix]bool
	waiters map[routeKey]func(time.Time)
	errs    int
}

type routeKey struct {
	p   netip.Prefix
	add bool
}

func watchRoutes(nsName string, overlay netip.Prefix, bits int) (*routeWatch, error) {
	h, err := netns.GetFromName(nsName)
	if err != nil {
		return nil, fmt.Errorf("route watch in %s: %w", nsName, err)
	}
	defer h.Close()
	w := &routeWatch{overlay: overlay, bits: bits, nsName: nsName, done: make(chan struct{}),
		routes: map[netip.Prefix]bool{}, waiters: map[routeKey]func(time.Time){}}
	ch := make(chan netlink.RouteUpdate, 4096)
	err = netlink.RouteSubscribeWithOptions(ch, w.done, netlink.RouteSubscribeOptions{
		Namespace:              &h,
		ListExisting:           true,
		ReceiveBufferSize:      64 << 20,
		ReceiveBufferForceSize: true,
		ErrorCallback: func(error) {
			w.mu.Lock()
			w.errs++
			w.mu.Unlock()
		},
	})
	if err != nil {
		return nil, fmt.Errorf("route subscription in %s: %w", nsName, err)
	}
	go func() {
		for u := range ch {
			w.update(u, time.Now())
		}
	}()
	return w, nil
}

func (w *routeWatch) prefix(r netlink.Route) (netip.Prefix, bool) {
	if r.Dst == nil || (r.Table != 0 && r.Table != unix.RT_TABLE_MAIN) {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(r.Dst.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := r.Dst.Mask.Size()
	p := netip.PrefixFrom(a.Unmap(), ones)
	if ones != w.bits || !w.overlay.Contains(p.Addr()) {
		return netip.Prefix{}, false
	}
	return p, true
}

func (w *routeWatch) update(u netlink.RouteUpdate, at time.Time) {
	p, ok := w.prefix(u.Route)
	if !ok {
		return
	}
	add := u.Type == unix.RTM_NEWROUTE
	if !add && u.Type != unix.RTM_DELROUTE {
		return
	}
	w.mu.Lock()
	if add {
		w.routes[p] = true
	} else {
		delete(w.routes, p)
	}
	f := w.waiters[routeKey{p, add}]
	delete(w.waiters, routeKey{p, add})
	w.mu.Unlock()
	if f != nil {
		f(at)
	}
}

// expect calls f with the time the route to p appears (add) or goes; a later expect
// of the same key replaces it.
func (w *routeWatch) expect(p netip.Prefix, add bool, f func(time.Time)) {
	w.mu.Lock()
	w.waiters[routeKey{p, add}] = f
	w.mu.Unlock()
}

func (w *routeWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.routes)
}

func (w *routeWatch) overflows() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errs
}

// list reads the routes from the kernel (not from the subscription).
func (w *routeWatch) list() (map[netip.Prefix]bool, error) {
	h, err := netns.GetFromName(w.nsName)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", w.nsName, err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", w.nsName, err)
	}
	defer nh.Close()
	rs, err := nh.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("routes in %s: %w", w.nsName, err)
	}
	out := map[netip.Prefix]bool{}
	for _, r := range rs {
		if p, ok := w.prefix(r); ok {
			out[p] = true
		}
	}
	return out, nil
}

func (w *routeWatch) close() { close(w.done) }
