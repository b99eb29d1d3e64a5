// Package daemon runs a weft node: lease -> backend -> data path. Run starts the lease
// source, finds the external interface, leases a subnet, sets up the backend, the
// firewall rules and blackhole routes, writes subnet.env, and then feeds the backend
// the other hosts' leases while it follows the interface, renews the lease, answers
// the health port and tells systemd how it goes, until its context ends. Cleanup
// removes what a node left on the host.
//
// Files: daemon.go (Run: the start-up order and the event feed), config.go (Config),
// kube.go (the Kubernetes lease source's start), iface.go and extwatch.go (choosing
// and following the external interface), attrs.go (what our lease publishes),
// firewall.go, blackhole.go, healthz.go (/healthz, /readyz, /stats), metrics.go
// (/metrics), notify.go (systemd), logfields.go (log fields), cleanup.go (Cleanup).
// No backend is named here: what the daemon needs of one it asks through the
// capabilities encap declares, and of encap/factory (names_test.go holds to it).
package daemon

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/factory"
	"github.com/weftnet/weft/firewall"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/lease/etcd"
	"github.com/weftnet/weft/paths"
)

// Run runs a node as cfg says until ctx ends (nil) or something fails. Before it
// returns, every goroutine it started has ended and the lease manager (etcd client,
// informer) is closed; the lease itself is kept for the next start.
func Run(ctx context.Context, cfg Config, log *zap.Logger) error {
	d := &daemon{cfg: &cfg, log: log, probeRTT: newProbeRTT()}
	err := d.run(ctx)
	if d.lingering != nil {
		d.log.Info("the data path goes on until the new weftd carries the traffic")
		<-d.lingering
		d.log.Info("the data path has stopped")
	}
	return err
}

// daemon wires one run of weftd: lease -> backend -> data path.
type daemon struct {
	cfg   *Config
	log   *zap.Logger
	ready atomic.Bool // the data path runs on a held lease
	be    atomic.Pointer[encap.Backend]
	mgr   atomic.Pointer[lease.Manager] // for /readyz
	held  atomic.Pointer[lease.Lease]   // our lease, once acquired
	// republishMu orders the changes of held's attributes that are republished.
	republishMu sync.Mutex
	fw          firewall.Firewall // nil with neither --ip-masq nor --iptables-forward-rules

	// fwRepairs counts rewrites of firewall rules found missing or changed
	// (weft_firewall_repairs_total).
	fwRepairs atomic.Uint64

	notify notifier // systemd (notify.go)

	// blackholes keeps --ip-blackhole-route's routes (nil without the flag);
	// blackholeMu orders its resync and a lease change.
	blackholes  *blackholer
	blackholeMu sync.Mutex

	// prober probes the peers' paths once the data path runs (nil: not probing);
	// probeRTT is its histogram of round trips (paths.go).
	prober   atomic.Pointer[paths.Prober]
	probeRTT prometheus.Histogram

	// wg counts the goroutines run started (spawn); run returns only when all ended.
	wg sync.WaitGroup
	// lingering closes when the data path left running for a new weftd has stopped
	// (encap.Lingerer); nil when none was.
	lingering <-chan struct{}
}

// spawn runs f in a goroutine that run waits for before it returns.
func (d *daemon) spawn(f func()) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		f()
	}()
}

// run is Run: start-up in order, then serve until ctx ends or something fails.
func (d *daemon) run(ctx context.Context) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	// A new weftd beside this one takes over (handover.go): it reads what it can while
	// this one runs, then asks it to stop; this one stops as on SIGTERM and tells it
	// when nothing of it runs any more.
	s := newSuccession(d.cfg.SubnetFile, d.log)
	running := s.hold()
	defer func() {
		cancel()
		err = s.release(err)
	}()
	d.notify.log = d.log
	defer d.notify.start(ctx)()
	if !running {
		s.watch(ctx, cancel)
		stop, err := d.startHealthz(ctx)
		if err != nil || ctx.Err() != nil {
			return err
		}
		defer stop()
	}
	mgr, err := d.manager()
	if err != nil {
		return err
	}
	d.mgr.Store(&mgr)
	defer func() {
		// Stop the goroutines, wait for them, and only then close what they used.
		cancel()
		d.wg.Wait()
		if err := mgr.Close(); err != nil {
			d.log.Warn("closing the lease manager", zap.Error(err))
		}
	}()
	cfg, choice, ext, err := d.prepare(ctx, mgr)
	if err != nil || cfg == nil {
		return err // cfg nil: stopped by ctx
	}
	be, err := factory.New(cfg, ext, d.cfg.Tuning, d.log)
	if err != nil {
		return err
	}
	if running {
		// All read that can be read: the weftd that runs stops now, and this one
		// touches the host only once it has, but for a data path that can run beside
		// that one's.
		d.startBeside(ctx, be)
		if err := s.takeOver(ctx, be); err != nil || ctx.Err() != nil {
			return err
		}
		s.watch(ctx, cancel)
		stop, err := d.startHealthz(ctx)
		if err != nil || ctx.Err() != nil {
			return err
		}
		defer stop()
	}
	// Each backend leaves its devices when weftd stops, for the next weftd; those of
	// another backend type have no next one.
	if err := removeOtherDevices(cfg.BackendType, d.log); err != nil {
		d.log.Warn("removing another backend type's devices", zap.Error(err))
	}
	d.be.Store(&be)
	defer func() {
		if l, ok := be.(encap.Lingerer); ok && s.by.Load() != 0 {
			d.lingering = l.Linger() // a new weftd takes over (handover.go)
		}
		if err := be.Close(); err != nil {
			d.log.Warn("closing the backend", zap.Error(err))
		}
		s.pass(be)
	}()

	attrs, err := leaseAttrs(ctx, be, ext)
	if err != nil {
		return err
	}
	if err := d.setSite(ctx, mgr, be, ext, &attrs); err != nil {
		return err
	}
	own, err := mgr.Acquire(ctx, attrs)
	if err != nil {
		if ctx.Err() != nil {
			d.log.Info("stopped while acquiring a lease")
			return nil
		}
		return fmt.Errorf("acquire lease: %w", err)
	}
	// Our lease as we publish it: the backend reads our site from it.
	own.Attrs.Site, own.Attrs.SiteIP, own.Attrs.NAT = attrs.Site, attrs.SiteIP, attrs.NAT
	d.log.Info("lease acquired", ownLeaseFields(own)...)
	d.held.Store(&own)
	// The other hosts' leases are listed beside the data path's setup, and the first
	// batch goes to the backend right after Register: a restarted weftd's device
	// (left in place by the last one) carries traffic again as soon as it can.
	w := d.watch(ctx, mgr, own.Key())
	defer w.close()
	env, err := d.install(ctx, cfg, be, own, w)
	if err != nil {
		return err
	}
	if m, ok := mgr.(lease.ReachabilityMonitor); ok {
		d.spawn(func() { m.MonitorReachability(ctx) })
	}
	if r, ok := mgr.(lease.ReadyMarker); ok {
		if err := r.MarkNetworkReady(ctx); err != nil {
			d.log.Warn("could not mark the node's network ready", zap.Error(err))
		}
	}
	// The interface may be deleted and made again (new index) or change address:
	// follow it by name until serve returns, before the backend is closed.
	fctx, stopFollow := context.WithCancel(ctx)
	var follow sync.WaitGroup
	defer follow.Wait()
	defer stopFollow()
	follow.Go(func() {
		followExternal(fctx, choice, ext, d.log, func(old, next encap.ExternalInterface) { d.externalMoved(mgr, be, old, next) })
	})
	return d.serve(ctx, mgr, be, own, env, w)
}

// firstLeasesWait bounds how long install waits for the watch's first batch after
// Register: a store slow to list does not hold up the firewall and subnet.env (feed
// hands the batch on when it comes).
const firstLeasesWait = time.Second

// leaseWatch is one Watch of the other hosts' leases, running until closed.
type leaseWatch struct {
	events chan []lease.Event
	stop   context.CancelFunc
	done   chan struct{}
}

// watch starts watching the leases of every host but own.
func (d *daemon) watch(ctx context.Context, mgr lease.Manager, own lease.Key) *leaseWatch {
	wctx, stop := context.WithCancel(ctx)
	w := &leaseWatch{events: make(chan []lease.Event, 16), stop: stop, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		_ = mgr.Watch(wctx, own, w.events)
	}()
	return w
}

// close stops the watch and waits for it; a second close does nothing.
func (w *leaseWatch) close() {
	w.stop()
	<-w.done
}

// prepare waits for the network config and the lease source's cache, and finds the
// external interface with the addresses peers send to. A nil config and error:
// stopped by ctx while waiting.
func (d *daemon) prepare(ctx context.Context, mgr lease.Manager) (*lease.Config, ifaceChoice, encap.ExternalInterface, error) {
	var choice ifaceChoice
	var ext encap.ExternalInterface
	cfg, err := mgr.Config(ctx)
	if err != nil {
		if ctx.Err() != nil {
			d.log.Info("stopped while waiting for the network config")
			return nil, choice, ext, nil // a signal, not a failure
		}
		return nil, choice, ext, fmt.Errorf("network config: %w", err)
	}
	if err := d.waitSynced(ctx, mgr, kubeCacheSyncTimeout); err != nil {
		return nil, choice, ext, err
	}
	if ctx.Err() != nil {
		d.log.Info("stopped while waiting for the node cache")
		return nil, choice, ext, nil
	}
	publicIP, publicIPv6, err := d.publicIPs(ctx, mgr, cfg)
	if err != nil {
		return nil, choice, ext, err
	}
	choice = d.ifaceChoice(publicIP)
	choice.publicIPv6, choice.ipv6, choice.noIPv4 = publicIPv6, cfg.EnableIPv6, !cfg.EnableIPv4
	ext, err = externalInterface(choice)
	if err != nil {
		return nil, choice, ext, err
	}
	d.log.Info("using external interface", extFields(ext)...)
	return cfg, choice, ext, nil
}

// ifaceChoice is what the interface flags ask for, with the public IP to use.
func (d *daemon) ifaceChoice(publicIP string) ifaceChoice {
	return ifaceChoice{ifaces: d.cfg.Ifaces, regexes: d.cfg.IfaceRegexes, canReach: d.cfg.IfaceCanReach, publicIP: publicIP}
}

// install sets the host up for our lease own: the backend, the firewall rules, the
// blackhole routes and subnet.env (returned), and starts the firewall's resync.
func (d *daemon) install(ctx context.Context, cfg *lease.Config, be encap.Backend, own lease.Lease, w *leaseWatch) (lease.SubnetEnv, error) {
	if err := be.Register(ctx, own); err != nil {
		return lease.SubnetEnv{}, fmt.Errorf("%s backend: %w", be.Type(), err)
	}
	t := time.NewTimer(firstLeasesWait)
	select {
	case evs := <-w.events:
		d.handle(ctx, be, evs)
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	// The rules come before subnet.env, as flanneld's do: a pod the CNI plugin starts
	// once the file is there must not send a packet unmasqueraded. They outlive weftd:
	// the kernel keeps forwarding for vxlan and host-gw while weftd restarts, which a
	// FORWARD DROP policy would otherwise cut off. `weftd cleanup` removes them.
	if err := d.setupFirewall(ctx, cfg, own); err != nil {
		return lease.SubnetEnv{}, err
	}
	if err := d.startBlackholes(ctx, own); err != nil {
		return lease.SubnetEnv{}, err
	}
	env := lease.SubnetEnv{Network: cfg.Network, Subnet: own.Subnet, IPv6Network: cfg.IPv6Network, IPv6Subnet: own.IPv6Subnet,
		MTU: be.MTU(), IPMasq: d.cfg.IPMasq}
	if err := lease.WriteSubnetEnv(d.cfg.SubnetFile, env); err != nil {
		return lease.SubnetEnv{}, err
	}
	if d.fw != nil {
		d.spawn(func() {
			firewall.Resync(ctx, d.fw, d.cfg.Resync, d.log, func() { d.fwRepairs.Add(1) })
		})
	}
	return env, nil
}

// serve runs the backend and feeds it lease events until ctx ends.
func (d *daemon) serve(ctx context.Context, mgr lease.Manager, be encap.Backend, own lease.Lease, env lease.SubnetEnv, w *leaseWatch) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	errc := make(chan error, 2)

	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := be.Run(ctx); err != nil && ctx.Err() == nil {
			errc <- fmt.Errorf("%s backend: %w", be.Type(), err)
		}
	}()

	if ol, ok := be.(encap.OutsideLearner); ok && own.Attrs.Site != "" {
		wg.Go(func() { d.keepOutside(ctx, mgr, ol) })
	}
	d.startProber(ctx, be, mgr, func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	})

	changed := make(chan lease.Lease, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = mgr.Hold(ctx, own, func(l lease.Lease) {
			select {
			case changed <- l:
			case <-ctx.Done():
			}
		})
	}()

	for {
		if w == nil {
			w = d.watch(ctx, mgr, own.Key())
		}
		d.ready.Store(true)
		d.notify.ready(readyStatus(leaseName(own), be.Type()))
		next, err := d.feed(ctx, be, w.events, changed, errc)
		w.close()
		w = nil
		if err != nil || ctx.Err() != nil {
			d.ready.Store(false)
			return err
		}
		// Our lease changed under us (deleted and re-acquired): configure the backend
		// for it, rewrite subnet.env if it differs, and watch again without it.
		d.log.Warn("our lease changed", zap.Stringer("old", own.Key()), zap.Stringer("new", next.Key()))
		if err := be.Register(ctx, next); err != nil {
			return fmt.Errorf("%s backend: %w", be.Type(), err)
		}
		if next.Key() != own.Key() {
			env.Subnet, env.IPv6Subnet = next.Subnet, next.IPv6Subnet
			if err := lease.WriteSubnetEnv(d.cfg.SubnetFile, env); err != nil {
				return err
			}
		}
		if d.cfg.IPMasq && (next.Subnet != own.Subnet || next.IPv6Subnet != own.IPv6Subnet) {
			if err := d.setMasq(ctx, env.Network, env.IPv6Network, next); err != nil {
				return err
			}
		}
		d.held.Store(&next)
		d.moveBlackholes(own, next)
		own = next
	}
}

// feed passes lease events to the backend until ctx ends, the backend fails, or our
// own lease changes (then it returns the new lease).
func (d *daemon) feed(ctx context.Context, be encap.Backend, events <-chan []lease.Event,
	changed <-chan lease.Lease, errc <-chan error) (lease.Lease, error) {
	for {
		select {
		case <-ctx.Done():
			return lease.Lease{}, nil
		case err := <-errc:
			return lease.Lease{}, err
		case l := <-changed:
			return l, nil
		case evs := <-events:
			d.handle(ctx, be, evs)
		}
	}
}

// handle logs lease events and passes them to the backend.
func (d *daemon) handle(ctx context.Context, be encap.Backend, evs []lease.Event) {
	for _, ev := range evs {
		d.log.Info("lease "+ev.Type.String(), peerLeaseFields(ev.Lease)...)
	}
	be.HandleEvents(ctx, evs)
}

// manager builds the lease source the flags ask for.
func (d *daemon) manager() (lease.Manager, error) {
	if d.cfg.Kube != nil {
		return d.kubeManager()
	}
	reg, err := etcd.NewRegistry(d.cfg.Etcd, d.log)
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	return etcd.NewManager(reg, etcd.ManagerOptions{
		SubnetFile:  d.cfg.SubnetFile,
		StateFile:   d.cfg.LeaseStateFile,
		RenewMargin: d.cfg.RenewMargin,
	}, d.log), nil
}

// leaseName names own for status lines: its IPv4 subnet, its IPv6 subnet, or both.
func leaseName(own lease.Lease) fmt.Stringer {
	switch {
	case !own.IPv6Subnet.IsValid():
		return own.Subnet
	case !own.Subnet.IsValid():
		return own.IPv6Subnet
	}
	return stringer(own.Subnet.String() + " and " + own.IPv6Subnet.String())
}

type stringer string

func (s stringer) String() string { return string(s) }
