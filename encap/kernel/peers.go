// Package kernel holds what the kernel backends (vxlan, host-gw) share: Peers, the
// desired set of peers fed by lease events (peers.go), the loop that makes the kernel
// match it (loop.go) through each backend's full and apply passes, the bookkeeping of
// what each pass put in the kernel (apply.go), the overlay routes (routes.go), the
// netlink watch that asks for a pass when the kernel loses an entry (watch.go), and
// the repairs and counters it reports (repairs.go).
package kernel

import (
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// Peers is what the kernel backends share: the desired set of peers fed by
// lease events, a loop that makes the kernel match it, and per-peer decisions logged
// once. The loop applies each batch of lease events to the changed peers' entries
// alone (O(changes) netlink calls); the full list-and-compare reconcile runs only at
// start, when our own subnet changes, every period, and when the kernel loses an
// entry we put there (see watchKernel).
type Peers struct {
	typ    string
	cfg    *lease.Config
	log    *zap.Logger
	nl     *netlink.Handle
	period time.Duration
	passes Passes
	// devices are the backend's own links (flannel.<VNI>, flannel-v6.<VNI>): losing
	// one needs a full pass.
	devices []string

	mu       sync.Mutex
	ext      encap.ExternalInterface // as New or SetExternal gave it; read with external
	own      netip.Prefix            // our IPv4 subnet
	own6     netip.Prefix            // our IPv6 subnet
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
	applied map[netip.Prefix]Programmed
	routed  map[netip.Prefix]netip.Prefix
	macs    [2]map[string]int
	// mtus are the route MTUs SetRouteMTU set, by subnet; the passes write them.
	mtus RouteMTUs
	// repairs and inPlace: see SettleIn.
	repairs map[string]uint64
	inPlace map[string]map[string]bool
	// watchReturning, when set (tests), is called as watchKernel returns, after it
	// has let go of its subscriptions.
	watchReturning func()
	// watchNS, when set (tests), is the namespace the kernel watch subscribes in
	// (default: the one of the thread that subscribes, weftd's).
	watchNS *netns.NsHandle
}

// fullPassPeriod is how often the full pass runs without being asked for. The netlink
// watch asks for one when an entry weftd wants is deleted, so the period is only the
// fallback for what the watch cannot see (an entry changed in place by another
// program). A pass lists every route, neighbour and fdb entry: with 5,000 peers it
// allocates tens of MB, which every 10 s (the period before) kept the heap and RSS up.
const fullPassPeriod = 5 * time.Minute

// Passes are a kernel backend's two ways of making the kernel match the peers.
type Passes struct {
	// Full lists what the kernel holds and makes all of it match (the reconcile pass).
	Full func() error
	// Apply writes the entries of the changed peers (by encap.PeerKey) alone,
	// without listing.
	Apply func(changed []netip.Prefix) error
}

// New returns the peers of a kernel backend of type typ (the BackendType of the
// leases it takes) with its passes; devices are the backend's own links, whose loss
// asks for a full pass. It opens a netlink handle (Close closes it).
func New(typ string, cfg *lease.Config, ext encap.ExternalInterface, passes Passes, log *zap.Logger, devices ...string) (*Peers, error) {
	// Routes, neighbours, links and addresses are all rtnetlink: a bare NewHandle also
	// opens xfrm and netfilter sockets, and fails where those protocols are missing (a
	// kernel without XFRM_USER or NFNETLINK, qemu-user).
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("%s backend: netlink: %w", typ, err)
	}
	return &Peers{
		typ: typ, cfg: cfg, ext: ext, log: log, nl: nl, period: fullPassPeriod, passes: passes, devices: devices,
		peers: map[netip.Prefix]lease.Lease{}, said: map[netip.Prefix]string{},
		kick: make(chan struct{}, 1), counters: map[string]uint64{},
		dirty: map[netip.Prefix]struct{}{}, full: true,
		applied: map[netip.Prefix]Programmed{}, routed: map[netip.Prefix]netip.Prefix{},
		macs:    [2]map[string]int{{}, {}},
		repairs: map[string]uint64{}, inPlace: map[string]map[string]bool{},
	}, nil
}

// NL is the netlink handle the backend programs the kernel with.
func (k *Peers) NL() *netlink.Handle { return k.nl }

// Close gives the routes whose MTU SetRouteMTU lowered their device's MTU again and
// closes the netlink handle. What the passes put in the kernel stays, as flanneld
// leaves it. Call it once Run has returned.
func (k *Peers) Close() error {
	err := k.mtus.Reset(k.nl)
	k.nl.Close()
	if err != nil {
		return fmt.Errorf("%s backend: %w", k.typ, err)
	}
	return nil
}

// External is the external interface as last set.
func (k *Peers) External() encap.ExternalInterface {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.ext
}

// SetExternal moves the backend onto ext (the external interface found again by
// name: a new index, another address) and asks for a full pass, which puts back
// what the old interface took with it.
func (k *Peers) SetExternal(ext encap.ExternalInterface) {
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

// SetOwn records our lease and asks for a full pass.
func (k *Peers) SetOwn(own lease.Lease) {
	k.mu.Lock()
	k.own, k.own6 = own.Subnet, own.IPv6Subnet
	delete(k.peers, encap.PeerKey(own))
	k.full = true
	k.mu.Unlock()
	k.poke()
}

// Handle applies lease events; the first call carries the initial snapshot.
func (k *Peers) Handle(events []lease.Event) {
	k.mu.Lock()
	for _, e := range events {
		s := encap.PeerKey(e.Lease)
		if k.isOwn(e.Lease) || !encap.InScope(k.cfg, e.Lease) {
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

func (k *Peers) poke() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// Snapshot returns the peers sorted by subnet, whether the snapshot has arrived, and our subnet.
func (k *Peers) Snapshot() ([]lease.Lease, bool, netip.Prefix) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]lease.Lease, 0, len(k.peers))
	for _, l := range k.peers {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Subnet.Addr().Less(out[j].Subnet.Addr()) })
	return out, k.synced, k.own
}

// isOwn reports whether l is our own lease (k.mu held).
func (k *Peers) isOwn(l lease.Lease) bool {
	if encap.HasV4(l) {
		return l.Subnet == k.own
	}
	return l.IPv6Subnet.IsValid() && l.IPv6Subnet == k.own6
}

// OwnSubnet returns our subnet of family f.
func (k *Peers) OwnSubnet(f encap.Family) netip.Prefix {
	k.mu.Lock()
	defer k.mu.Unlock()
	if f.Is6() {
		return k.own6
	}
	return k.own
}

// Once logs msg for peer the first time it is said, and again only when it changes;
// it reports whether it logged.
func (k *Peers) Once(peer netip.Prefix, isErr bool, msg string, fields ...zap.Field) bool {
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

// Count adds one to the counter name (Report's Counters).
func (k *Peers) Count(name string) {
	k.mu.Lock()
	k.counters[name]++
	k.mu.Unlock()
}
