package encap

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/lease"
)

// kernelPeers is what the kernel backends share: the desired set of peers fed by
// lease events, a loop that makes the kernel match it, and per-peer decisions logged
// once. The loop applies each batch of lease events to the changed peers' entries
// alone (O(changes) netlink calls); the full list-and-compare reconcile runs only at
// start, when our own subnet changes, every period, and when the kernel loses an
// entry we put there (see watchKernel).
type kernelPeers struct {
	typ    string
	cfg    *lease.Config
	log    *zap.Logger
	nl     *netlink.Handle
	period time.Duration
	// devices are the backend's own links (flannel.<VNI>, flannel-v6.<VNI>): losing
	// one needs a full pass.
	devices []string

	mu       sync.Mutex
	ext      ExternalInterface // as New or SetExternal gave it; read with external
	own      netip.Prefix      // our IPv4 subnet
	own6     netip.Prefix      // our IPv6 subnet
	peers    map[netip.Prefix]lease.Lease
	synced   bool // the first snapshot has arrived: stale entries may be removed
	said     map[netip.Prefix]string
	kick     chan struct{}
	counters map[string]uint64
	// dirty holds the peers changed since the last pass; full asks for a full pass.
	dirty map[netip.Prefix]struct{}
	full  bool
	// dirty, peers and applied are keyed by peerKey (a dual-stack peer's IPv4 subnet).
	// applied is what the last passes put in the kernel per peer and family, routed
	// maps each applied route's destination (either family) to its peer, and macs[i]
	// counts the applied peers of family i sharing each VtepMAC (an fdb entry is
	// removed with its last user). Only the run loop writes them; watchKernel reads
	// them.
	applied map[netip.Prefix]programmed
	routed  map[netip.Prefix]netip.Prefix
	macs    [2]map[string]int
	// repairs and inPlace: see settleIn.
	repairs map[string]uint64
	inPlace map[string]map[string]bool
	// watchReturning, when set (tests), is called as watchKernel returns, after it
	// has let go of its subscriptions.
	watchReturning func()
	// watchNS, when set (tests), is the namespace the kernel watch subscribes in
	// (default: the one of the thread that subscribes, weftd's).
	watchNS *netns.NsHandle
}

// programmed is what a kernel backend put in the kernel for one peer, per family
// (indexed by family.idx: IPv4, IPv6).
type programmed [2]entries

// entries is what a kernel backend put in the kernel for one peer in one family.
type entries struct {
	dst  netip.Prefix // the route's destination (invalid: nothing of the family)
	link int          // the route's link
	mac  string       // vxlan: the VtepMAC of its neighbour and fdb entries ("" for none)
	gw   netip.Addr   // vxlan: the neighbour entry's address
	pub  netip.Addr   // vxlan: the fdb entry's destination
}

// fullPassPeriod is how often the full pass runs without being asked for. The netlink
// watch asks for one when an entry weftd wants is deleted, so the period is only the
// fallback for what the watch cannot see (an entry changed in place by another
// program). A pass lists every route, neighbour and fdb entry: with 5,000 peers it
// allocates tens of MB, which every 10 s (the period before) kept the heap and RSS up.
const fullPassPeriod = 5 * time.Minute

func newKernelPeers(typ string, cfg *lease.Config, ext ExternalInterface, log *zap.Logger) (*kernelPeers, error) {
	// Routes, neighbours, links and addresses are all rtnetlink: a bare NewHandle also
	// opens xfrm and netfilter sockets, and fails where those protocols are missing (a
	// kernel without XFRM_USER or NFNETLINK, qemu-user).
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("%s backend: netlink: %w", typ, err)
	}
	return &kernelPeers{
		typ: typ, cfg: cfg, ext: ext, log: log, nl: nl, period: fullPassPeriod,
		peers: map[netip.Prefix]lease.Lease{}, said: map[netip.Prefix]string{},
		kick: make(chan struct{}, 1), counters: map[string]uint64{},
		dirty: map[netip.Prefix]struct{}{}, full: true,
		applied: map[netip.Prefix]programmed{}, routed: map[netip.Prefix]netip.Prefix{},
		macs:    [2]map[string]int{{}, {}},
		repairs: map[string]uint64{}, inPlace: map[string]map[string]bool{},
	}, nil
}

// external is the external interface as last set.
func (k *kernelPeers) external() ExternalInterface {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.ext
}

// SetExternal moves the backend onto ext (the external interface found again by
// name: a new index, another address) and asks for a full pass, which puts back
// what the old interface took with it.
func (k *kernelPeers) SetExternal(ext ExternalInterface) {
	k.mu.Lock()
	old := k.ext
	k.ext = ext
	k.full = true
	k.mu.Unlock()
	k.log.Info("the external interface changed; reprogramming the kernel data path",
		zap.String("iface", ext.Name), zap.Int("old-index", old.Index), zap.Int("index", ext.Index),
		zap.Stringer("old-ip", old.IfaceIP), zap.Stringer("ip", ext.IfaceIP))
	k.poke()
}

func (k *kernelPeers) setOwn(own lease.Lease) {
	k.mu.Lock()
	k.own, k.own6 = own.Subnet, own.IPv6Subnet
	delete(k.peers, peerKey(own))
	k.full = true
	k.mu.Unlock()
	k.poke()
}

// handle applies lease events; the first call carries the initial snapshot.
func (k *kernelPeers) handle(events []lease.Event) {
	k.mu.Lock()
	for _, e := range events {
		s := peerKey(e.Lease)
		if k.isOwn(e.Lease) || !inScope(k.cfg, e.Lease) {
			continue
		}
		if e.Type == lease.Added && lease.CompatibleWith(k.typ, e.Lease) {
			k.peers[s] = e.Lease
		} else {
			delete(k.peers, s)
			delete(k.said, e.Lease.Subnet)
			delete(k.said, e.Lease.IPv6Subnet)
		}
		k.dirty[s] = struct{}{}
	}
	if !k.synced {
		k.full = true
	}
	k.synced = true
	k.mu.Unlock()
	k.poke()
}

func (k *kernelPeers) poke() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// snapshot returns the peers sorted by subnet, whether the snapshot has arrived, and our subnet.
func (k *kernelPeers) snapshot() ([]lease.Lease, bool, netip.Prefix) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]lease.Lease, 0, len(k.peers))
	for _, l := range k.peers {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Subnet.Addr().Less(out[j].Subnet.Addr()) })
	return out, k.synced, k.own
}

// once logs msg for peer the first time it is said, and again only when it changes;
// it reports whether it logged.
func (k *kernelPeers) once(peer netip.Prefix, isErr bool, msg string, fields ...zap.Field) bool {
	k.mu.Lock()
	if k.said[peer] == msg {
		k.mu.Unlock()
		return false
	}
	k.said[peer] = msg
	k.mu.Unlock()
	if isErr {
		k.log.Error(msg, fields...)
	} else {
		k.log.Info(msg, fields...)
	}
	return true
}

func (k *kernelPeers) count(name string) {
	k.mu.Lock()
	k.counters[name]++
	k.mu.Unlock()
}

// repair asks for a full reconcile pass soon.
func (k *kernelPeers) repair() {
	k.mu.Lock()
	k.full = true
	k.mu.Unlock()
	k.poke()
}

// families returns the families the config enables.
func (k *kernelPeers) families() []family {
	var out []family
	for _, f := range []family{v4(k.cfg), v6(k.cfg)} {
		if f.on() {
			out = append(out, f)
		}
	}
	return out
}

// run makes the kernel match the peers until ctx ends: reconcile (the full pass) at
// once, every period and whenever one is asked for (setOwn, repair); on other kicks,
// apply with the peers changed since the last pass. It returns only once the kernel
// watch it starts has returned.
func (k *kernelPeers) run(ctx context.Context, reconcile func() error, apply func(changed []netip.Prefix) error) error {
	ctx, cancel := context.WithCancel(ctx)
	var watch sync.WaitGroup
	defer watch.Wait()
	defer cancel() // runs first: the watch stops on any return
	watch.Go(func() { k.watchKernel(ctx) })
	t := time.NewTicker(k.period)
	defer t.Stop()
	var last string
	tick := false
	for {
		k.mu.Lock()
		full, changed := k.full || tick, []netip.Prefix(nil)
		if !full {
			changed = make([]netip.Prefix, 0, len(k.dirty))
			for s := range k.dirty {
				changed = append(changed, s)
			}
			sort.Slice(changed, func(i, j int) bool { return changed[i].Addr().Less(changed[j].Addr()) })
		}
		k.full, tick = false, false
		clear(k.dirty)
		k.mu.Unlock()
		var err error
		switch {
		case full:
			k.count("full_reconciles")
			err = reconcile()
		case len(changed) > 0:
			k.count("applies")
			err = apply(changed)
		}
		if err != nil {
			if err.Error() != last {
				k.log.Warn("reconciling the kernel data path", zap.Error(err))
			}
			last = err.Error()
		} else {
			last = ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-k.kick:
		case <-t.C:
			tick = true
		}
	}
}

// directlyConnected reports whether ip is on a subnet connected to the external
// interface (the kernel would reach it without a gateway).
func (k *kernelPeers) directlyConnected(ip netip.Addr) (bool, string) {
	routes, err := k.nl.RouteGet(net.IP(ip.AsSlice()))
	if err != nil || len(routes) == 0 {
		return false, fmt.Sprintf("no route to %v", ip)
	}
	r, ext := routes[0], k.external()
	switch {
	case r.Gw != nil:
		return false, fmt.Sprintf("%v is reached via gateway %v", ip, r.Gw)
	case r.LinkIndex != ext.Index:
		return false, fmt.Sprintf("%v is reached on another interface (index %d)", ip, r.LinkIndex)
	}
	return true, fmt.Sprintf("%v is on a subnet connected to %s", ip, ext.Name)
}

// routeKey identifies a route by destination (either family).
func routeKey(r netlink.Route) netip.Prefix {
	if r.Dst == nil {
		return netip.Prefix{}
	}
	ip, _ := netip.AddrFromSlice(r.Dst.IP)
	ones, _ := r.Dst.Mask.Size()
	return netip.PrefixFrom(ip.Unmap(), ones)
}

// syncRoutes makes the overlay routes of family f on the given links match want:
// missing or different ones are replaced; when prune is set, overlay routes of ours
// that are not wanted are deleted.
func (k *kernelPeers) syncRoutes(f family, want map[netip.Prefix]netlink.Route, links []int, own netip.Prefix, prune bool) error {
	k.count("netlink_lists")
	have, err := k.nl.RouteList(nil, f.nl)
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	byDst := map[netip.Prefix]netlink.Route{}
	for _, r := range have {
		if p := routeKey(r); p.IsValid() && (r.Table == 254 || r.Table == 0) {
			byDst[p] = r
		}
	}
	var firstErr error
	inPlace, written := map[string]bool{}, map[string]bool{}
	for dst, w := range want {
		h, ok := byDst[dst]
		if ok && h.LinkIndex == w.LinkIndex && h.Gw.Equal(w.Gw) && h.Flags&int(netlink.FLAG_ONLINK) == w.Flags&int(netlink.FLAG_ONLINK) {
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
	k.settleIn(f.slot("route"), "route", inPlace, written)
	if !prune {
		return firstErr
	}
	for dst, h := range byDst {
		if _, ok := want[dst]; ok || dst == own || !f.fits(dst) {
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
