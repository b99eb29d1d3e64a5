// Package udp holds the udp backend: flannel0 (a TUN device) and the userspace data
// path of proxy/ carrying the overlay in UDP datagrams (udp.go), and its options and
// tuning (options.go).
package udp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/kernel"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/proxy"
	"github.com/weftnet/weft/tun"
)

// UDPDevice is the name of the udp backend's TUN device, as flanneld names it.
const UDPDevice = "flannel0"

// backend carries the overlay in UDP datagrams through flannel0 and proxy/.
type backend struct {
	cfg        *lease.Config
	opts       udpOptions
	pcfg       proxy.Config
	tunOffload bool
	tunNoUSO   bool
	log        *zap.Logger
	table      *proxy.Table

	mu    sync.Mutex
	dev   *tun.Device
	px    *proxy.Proxy
	own   lease.Lease
	ready chan struct{} // closed once the data path is open
	// rebind asks Run to open the data path again on pcfg's (new) addresses; stop
	// ends the running proxy's Run (nil when none runs).
	rebind bool
	stop   context.CancelFunc
	// mtus are the route MTUs SetRouteMTU set, by subnet; a remade flannel0 gets them
	// again.
	mtus kernel.RouteMTUs
	// repairs counts what Run put back, by object ("device").
	repairs map[string]uint64
}

// New returns the udp backend. It opens nothing: Register opens flannel0 and the
// sockets in the network namespace of the calling thread. flannel0 is opened with TUN
// offloads (TSO and USO in, coalesced TCP and UDP out) unless tuning.NoTUNOffload.
//
// With cfg.EnableIPv6 (weft only: flannel's udp backend is IPv4-only) the table gets
// the IPv6 network, flannel0 an IPv6 address and route, and each worker an IPv6
// socket on the same port, for peers whose lease has only a PublicIPv6; the default
// MTU leaves room for the IPv6 underlay's longer header. Without a cfg.Network (an
// IPv6-only network) flannel0 and the table have only the IPv6 side, and every peer
// is reached over the IPv6 underlay.
func New(cfg *lease.Config, ext encap.ExternalInterface, tuning Tuning, log *zap.Logger) (encap.Backend, error) {
	opts, pcfg, table, err := prepare(cfg, ext.MTU, tuning)
	if err != nil {
		return nil, err
	}
	pcfg.Addr, _ = bindAddrs(cfg, ext)
	if cfg.EnableIPv6 {
		pcfg.IPv6 = true
		_, pcfg.Addr6 = bindAddrs(cfg, ext)
	}
	return &backend{cfg: cfg, opts: opts, pcfg: pcfg, tunOffload: !tuning.NoTUNOffload, tunNoUSO: tuning.NoTUNUSO, log: log, table: table,
		ready: make(chan struct{})}, nil
}

// bindAddrs are the addresses the sockets bind to. As flanneld: the interface's
// address, so datagrams leave from it and peers (whose ingress checks want a leased
// source) see the address they expect.
func bindAddrs(cfg *lease.Config, ext encap.ExternalInterface) (addr, addr6 netip.Addr) {
	if ext.IfaceIP.Is4() {
		addr = ext.IfaceIP
	}
	if cfg.EnableIPv6 && ext.IfaceIPv6.Is6() && !ext.IfaceIPv6.Is4In6() {
		addr6 = ext.IfaceIPv6
	}
	return addr, addr6
}

func (b *backend) Type() string { return "udp" }

// BackendData is empty: flanneld publishes none for udp.
func (b *backend) BackendData(context.Context) (json.RawMessage, error) { return nil, nil }

func (b *backend) MTU() int { return b.opts.MTU }

// Register opens flannel0 (first call) and gives it own's network address.
func (b *backend) Register(ctx context.Context, own lease.Lease) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cfg.Network.IsValid() {
		if err := b.table.SetLocal(own.Subnet); err != nil {
			return fmt.Errorf("udp backend: own subnet: %w", err)
		}
	}
	v6 := b.cfg.EnableIPv6 && own.IPv6Subnet.IsValid()
	if v6 {
		if err := b.table.SetLocal(own.IPv6Subnet); err != nil {
			return fmt.Errorf("udp backend: own IPv6 subnet: %w", err)
		}
	}
	b.own = own
	if err := b.openLocked(); err != nil {
		return err
	}
	if b.px != nil {
		return nil
	}
	if err := b.listenLocked(); err != nil {
		return err
	}
	select {
	case <-b.ready:
	default:
		close(b.ready)
	}
	return nil
}

// StartBeside opens more queues on the flannel0 of the weftd this one replaces, and
// more sockets on its port (every udp socket is in an SO_REUSEPORT group), for own as
// that weftd held it: the kernel spreads the traffic over both until that one
// stops. What comes to ours waits for Run. See encap.BesideStarter.
func (b *backend) StartBeside(ctx context.Context, own lease.Lease) error {
	return b.Register(ctx, own)
}

// openLocked opens flannel0 (unless open) and configures it for b.own.
func (b *backend) openLocked() error {
	if b.dev == nil {
		dev, err := tun.Open(tun.Config{Name: UDPDevice, Queues: b.opts.Workers, Offload: b.tunOffload, NoUSO: b.tunNoUSO, Persist: true}, b.log)
		if err != nil {
			return fmt.Errorf("udp backend: %w", err)
		}
		b.dev = dev
	}
	setup := tun.Setup{MTU: b.opts.MTU}
	if b.cfg.Network.IsValid() {
		setup.Addr = b.own.Subnet.Masked().Addr()
		setup.Routes = append(setup.Routes, b.cfg.Network)
	}
	if b.cfg.EnableIPv6 && b.own.IPv6Subnet.IsValid() {
		setup.Addr6 = b.own.IPv6Subnet.Masked().Addr()
		setup.Routes = append(setup.Routes, b.cfg.IPv6Network)
	}
	if err := b.dev.Configure(setup); err != nil {
		return fmt.Errorf("udp backend: %w", err)
	}
	return nil
}

// listenLocked opens the sockets on pcfg's addresses and the proxy over flannel0's
// queues.
func (b *backend) listenLocked() error {
	qs := b.dev.Queues()
	queues := make([]proxy.TUN, len(qs))
	for i, q := range qs {
		queues[i] = q
	}
	px, err := proxy.New(b.pcfg, b.table, queues, b.log)
	if err != nil && b.pcfg.IPv6 && b.cfg.Network.IsValid() {
		// A dual-stack host without IPv6 sockets still carries everything over IPv4.
		b.log.Warn("udp backend: no IPv6 underlay", zap.Error(err))
		b.pcfg.IPv6 = false
		px, err = proxy.New(b.pcfg, b.table, queues, b.log)
	}
	if err != nil {
		return fmt.Errorf("udp backend: %w", err)
	}
	b.px = px
	return nil
}

// SetExternal rebinds the sockets when ext's addresses differ from the ones they are
// bound to: Run closes the data path (sockets, flannel0's queues, and so flannel0)
// and opens it again on the new addresses. A socket bound to an address that went
// away with its interface and came back with it needs nothing: it works again.
func (b *backend) SetExternal(ext encap.ExternalInterface) {
	b.mu.Lock()
	defer b.mu.Unlock()
	addr, addr6 := bindAddrs(b.cfg, ext)
	if !b.pcfg.IPv6 {
		addr6 = b.pcfg.Addr6
	}
	if addr == b.pcfg.Addr && addr6 == b.pcfg.Addr6 {
		return
	}
	b.log.Info("the external interface's address changed; rebinding the udp sockets",
		zap.String("iface", ext.Name), zap.Stringer("old", b.pcfg.Addr), zap.Stringer("new", addr))
	b.pcfg.Addr, b.pcfg.Addr6 = addr, addr6
	b.rebind = true
	if b.stop != nil {
		b.stop()
	}
}

// reopenLocked opens the data path again after its proxy's Run closed it.
func (b *backend) reopenLocked() error {
	b.rebind = false
	if b.dev != nil {
		if err := b.dev.Close(); err != nil {
			b.log.Warn("udp backend: closing flannel0 to rebind", zap.Error(err))
		}
		b.dev = nil
	}
	b.px = nil
	if err := b.openLocked(); err != nil {
		return err
	}
	if b.mtus.Len() > 0 {
		b.applyRouteMTUsLocked()
	}
	return b.listenLocked()
}

// applyRouteMTUsLocked writes the route MTUs SetRouteMTU set on flannel0 again (it
// was made again, and its routes went with the old one).
func (b *backend) applyRouteMTUsLocked() {
	link, err := netlink.LinkByName(UDPDevice)
	if err != nil {
		b.log.Warn("udp backend: route MTUs not set again", zap.Error(err))
		return
	}
	for _, n := range []netip.Prefix{b.cfg.Network, b.cfg.IPv6Network} {
		if !n.IsValid() {
			continue
		}
		if err := b.mtus.ApplyOn(link.Attrs().Index, n); err != nil {
			b.log.Warn("udp backend: route MTUs not set again", zap.Error(err))
		}
	}
}

// HandleEvents updates the subnet table in one copy-on-write step per batch.
func (b *backend) HandleEvents(_ context.Context, events []lease.Event) {
	b.mu.Lock()
	own, ownPub := b.own, b.own.Attrs.PublicIP
	b.mu.Unlock()
	var set []proxy.Route
	var remove []netip.Prefix
	for _, e := range events {
		l := e.Lease
		if own.Subnet.IsValid() && l.Subnet == own.Subnet || own.IPv6Subnet.IsValid() && l.IPv6Subnet == own.IPv6Subnet {
			continue // our own lease (or an earlier form of it)
		}
		subnets := []netip.Prefix{l.Subnet}
		if !l.Subnet.IsValid() || l.Subnet.Bits() == 0 { // an IPv6-only lease
			subnets = subnets[:0]
		}
		if b.cfg.EnableIPv6 && l.IPv6Subnet.IsValid() {
			subnets = append(subnets, l.IPv6Subnet)
		}
		if e.Type == lease.Added && lease.CompatibleWith("udp", l) {
			// A host with only an IPv6 address is reached over the IPv6 underlay, and
			// so is every host from one (its datagrams must come from the address
			// its peers know it by).
			pub := l.Attrs.PublicIP
			if l.Attrs.PublicIPv6.IsValid() && (!usableIP(pub) || !usableIP(ownPub)) {
				pub = l.Attrs.PublicIPv6
			}
			for _, sn := range subnets {
				set = append(set, proxy.Route{Subnet: sn, PublicIP: pub})
			}
			continue
		}
		// Removed, or now of another backend type: no longer reachable over udp.
		remove = append(remove, subnets...)
	}
	if err := b.table.Apply(set, remove); err != nil {
		b.log.Warn("udp backend: some leases ignored", zap.Error(err))
	}
	b.log.Debug("udp routes updated", zap.Int("set", len(set)), zap.Int("removed", len(remove)),
		zap.Int("peers", b.table.Load().Len()))
}

// usableIP reports whether a lease's PublicIP is one to send to (flanneld writes
// 0.0.0.0 or nothing for a host without an IPv4 address).
func usableIP(a netip.Addr) bool { return a.IsValid() && !a.IsUnspecified() }

// Run forwards until ctx ends; it waits for Register first, and opens the data
// path again whenever SetExternal asks it to rebind, or when flannel0 was deleted
// under it (ip link del: the queues' reads fail at once), with its address, routes
// and route MTUs.
func (b *backend) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-b.ready:
	}
	for {
		b.mu.Lock()
		if b.rebind {
			if err := b.reopenLocked(); err != nil {
				b.mu.Unlock()
				return err
			}
		}
		px := b.px
		pctx, stop := context.WithCancel(ctx)
		b.stop = stop
		b.mu.Unlock()
		err := px.Run(pctx)
		stop()
		b.mu.Lock()
		b.stop = nil
		if err != nil && ctx.Err() == nil && !b.rebind && deviceGone() {
			b.log.Warn("udp backend: "+UDPDevice+" was deleted; making it again", zap.Error(err))
			b.rebind = true
			if b.repairs == nil {
				b.repairs = map[string]uint64{}
			}
			b.repairs["device"]++
		}
		again := b.rebind
		b.mu.Unlock()
		if ctx.Err() != nil || !again {
			return err
		}
	}
}

// deviceGone reports whether flannel0 is no longer there.
func deviceGone() bool {
	_, err := netlink.LinkByName(UDPDevice)
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

// Close closes the sockets and flannel0's queues, and leaves flannel0 (persistent)
// with its address and the network's routes (not the route MTUs this process chose)
// for the next weftd, which attaches to it:
// until then the kernel drops what is routed to it, and nothing is routed elsewhere.
// `weftd cleanup` removes it.
func (b *backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	if b.px != nil {
		errs = append(errs, b.px.Close())
	}
	if b.mtus.Len() > 0 {
		if link, err := netlink.LinkByName(UDPDevice); err == nil {
			errs = append(errs, b.mtus.ClearOn(link.Attrs().Index))
		}
	}
	if b.dev != nil {
		errs = append(errs, b.dev.Close())
		b.dev = nil
	}
	return errors.Join(errs...)
}

// Report returns the number of subnets in the data path's table and its counters
// (zero before Register): /stats serves the counters (proxy.Stats) as they are, and
// /metrics the weft_udp_* metrics made from them.
func (b *backend) Report() encap.Report {
	b.mu.Lock()
	px := b.px
	b.mu.Unlock()
	st := proxy.Stats{}
	if px != nil {
		st = px.Stats()
	}
	r := report(b.table.Load().Len(), st)
	b.mu.Lock()
	r.Repairs = maps.Clone(b.repairs)
	b.mu.Unlock()
	return r
}

// RepairKinds are the objects Run puts back: flannel0, with its address, routes and
// route MTUs.
func (b *backend) RepairKinds() []string { return []string{"device"} }

var _ encap.RepairKindLister = (*backend)(nil)

// report is the Report of a backend with peers subnets and the counters st.
func report(peers int, st proxy.Stats) encap.Report {
	return encap.Report{Peers: peers, Stats: st, Metrics: metrics(st)}
}
