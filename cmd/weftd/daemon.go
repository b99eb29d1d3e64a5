package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/factory"
	"github.com/weftnet/weft/firewall"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/lease/etcd"
)

// daemon wires one run of weftd: lease -> backend -> data path.
type daemon struct {
	opts  *options
	log   *zap.Logger
	ready atomic.Bool // the data path runs on a held lease
	be    atomic.Pointer[encap.Backend]
	mgr   atomic.Pointer[lease.Manager] // for /readyz
	held  atomic.Pointer[lease.Lease]   // our lease, once acquired
	fw    firewall.Firewall             // nil with neither --ip-masq nor --iptables-forward-rules

	// fwRepairs counts rewrites of firewall rules found missing or changed
	// (weft_firewall_repairs_total).
	fwRepairs atomic.Uint64

	notify notifier // systemd (notify.go)

	// blackholes keeps --ip-blackhole-route's routes (nil without the flag);
	// blackholeMu orders its resync and a lease change.
	blackholes  *blackholer
	blackholeMu sync.Mutex

	// wg counts the goroutines run started (spawn); run returns only when all ended.
	wg sync.WaitGroup
}

// spawn runs f in a goroutine that run waits for before it returns.
func (d *daemon) spawn(f func()) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		f()
	}()
}

// run runs weftd until ctx ends or something fails. Before it returns, every
// goroutine it started has ended and the lease manager (etcd client, informer) is
// closed; the lease itself is kept for the next start.
func (d *daemon) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d.notify.log = d.log
	defer d.notify.start(ctx)()
	if d.opts.healthzPort > 0 {
		stopHealthz, err := d.serveHealthz()
		if err != nil {
			return err
		}
		defer stopHealthz()
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
	cfg, err := mgr.Config(ctx)
	if err != nil {
		if ctx.Err() != nil {
			d.log.Info("stopped while waiting for the network config")
			return nil // a signal, not a failure
		}
		return fmt.Errorf("network config: %w", err)
	}
	if err := d.waitSynced(ctx, mgr, kubeCacheSyncTimeout); err != nil {
		return err
	}
	if ctx.Err() != nil {
		d.log.Info("stopped while waiting for the node cache")
		return nil
	}
	publicIP, publicIPv6, err := d.publicIPs(ctx, mgr, cfg)
	if err != nil {
		return err
	}
	choice := d.opts.ifaceChoice(publicIP)
	choice.publicIPv6, choice.ipv6, choice.noIPv4 = publicIPv6, cfg.EnableIPv6, !cfg.EnableIPv4
	ext, err := externalInterface(choice)
	if err != nil {
		return err
	}
	d.log.Info("using external interface", extFields(ext)...)
	be, err := factory.New(cfg, ext, d.opts.tuning, d.log)
	if err != nil {
		return err
	}
	d.be.Store(&be)
	defer be.Close()

	attrs, err := leaseAttrs(ctx, be, ext)
	if err != nil {
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
	d.log.Info("lease acquired", ownLeaseFields(own)...)
	d.held.Store(&own)
	if err := be.Register(ctx, own); err != nil {
		return fmt.Errorf("%s backend: %w", be.Type(), err)
	}
	// The rules come before subnet.env, as flanneld's do: a pod the CNI plugin starts
	// once the file is there must not send a packet unmasqueraded. They outlive weftd:
	// the kernel keeps forwarding for vxlan and host-gw while weftd restarts, which a
	// FORWARD DROP policy would otherwise cut off. `weftd cleanup` removes them.
	if err := d.setupFirewall(ctx, cfg, own); err != nil {
		return err
	}
	if err := d.startBlackholes(ctx, own); err != nil {
		return err
	}
	env := lease.SubnetEnv{Network: cfg.Network, Subnet: own.Subnet, IPv6Network: cfg.IPv6Network, IPv6Subnet: own.IPv6Subnet,
		MTU: be.MTU(), IPMasq: d.opts.ipMasq}
	if err := lease.WriteSubnetEnv(d.opts.subnetFile, env); err != nil {
		return err
	}
	if d.fw != nil {
		d.spawn(func() {
			firewall.Resync(ctx, d.fw, time.Duration(d.opts.iptablesResync)*time.Second, d.log,
				func() { d.fwRepairs.Add(1) })
		})
	}
	if m, ok := mgr.(etcdMonitor); ok {
		d.spawn(func() { m.MonitorEtcd(ctx) })
	}
	if r, ok := mgr.(readyMarker); ok {
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
	return d.serve(ctx, mgr, be, own, env)
}

// etcdMonitor is implemented by managers that can report their store's reachability
// (etcd v3: one log line when it is lost, one when it is back).
type etcdMonitor interface {
	MonitorEtcd(ctx context.Context)
}

// readyMarker is implemented by managers that tell their store when the network is up
// (Kubernetes: the node's NetworkUnavailable condition).
type readyMarker interface {
	MarkNetworkReady(ctx context.Context) error
}

// serve runs the backend and feeds it lease events until ctx ends.
func (d *daemon) serve(ctx context.Context, mgr lease.Manager, be encap.Backend, own lease.Lease, env lease.SubnetEnv) error {
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
		events := make(chan []lease.Event, 16)
		wctx, stopWatch := context.WithCancel(ctx)
		wdone := make(chan struct{})
		go func(k lease.Key) {
			defer close(wdone)
			_ = mgr.Watch(wctx, k, events)
		}(own.Key())
		d.ready.Store(true)
		d.notify.ready(readyStatus(leaseName(own), be.Type()))
		next, err := d.feed(ctx, be, events, changed, errc)
		stopWatch()
		<-wdone
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
			if err := lease.WriteSubnetEnv(d.opts.subnetFile, env); err != nil {
				return err
			}
		}
		if d.opts.ipMasq && (next.Subnet != own.Subnet || next.IPv6Subnet != own.IPv6Subnet) {
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
			for _, ev := range evs {
				d.log.Info("lease "+ev.Type.String(), peerLeaseFields(ev.Lease)...)
			}
			be.HandleEvents(ctx, evs)
		}
	}
}

// manager builds the lease source the flags ask for.
func (d *daemon) manager() (lease.Manager, error) {
	if d.opts.kubeSubnetMgr {
		return d.kubeManager()
	}
	reg, err := etcd.NewRegistry(etcd.Options{
		Endpoints: splitList(d.opts.etcdEndpoints),
		Prefix:    d.opts.etcdPrefix,
		CertFile:  d.opts.etcdCertFile,
		KeyFile:   d.opts.etcdKeyFile,
		CAFile:    d.opts.etcdCAFile,
		Username:  d.opts.etcdUsername,
		Password:  d.opts.etcdPassword,
		API:       d.opts.etcdAPI,
	}, d.log)
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	return etcd.NewManager(reg, etcd.ManagerOptions{
		SubnetFile:  d.opts.subnetFile,
		StateFile:   d.opts.leaseStateFile,
		RenewMargin: time.Duration(d.opts.renewMargin) * time.Minute,
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
