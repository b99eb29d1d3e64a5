package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/factory"
	"github.com/weftnet/weft/lease"
)

// leaseAttrs is what our lease publishes: the public addresses of ext and the
// backend's data, for IPv6 too when the backend has some (vxlan's flannel-v6.<VNI>).
func leaseAttrs(ctx context.Context, be encap.Backend, ext encap.ExternalInterface) (lease.Attrs, error) {
	data, err := be.BackendData(ctx)
	if err != nil {
		return lease.Attrs{}, fmt.Errorf("%s backend: %w", be.Type(), err)
	}
	a := lease.Attrs{PublicIP: ext.PublicIP, PublicIPv6: ext.PublicIPv6, BackendType: be.Type(), BackendData: data}
	if la, ok := be.(encap.LeaseAddressChooser); ok {
		// flanneld's extension backend publishes the interface's addresses.
		a.PublicIP, a.PublicIPv6 = la.LeaseAddrs()
	}
	if v6, ok := be.(encap.IPv6DataPublisher); ok {
		if a.BackendV6Data, err = v6.BackendV6Data(ctx); err != nil {
			return lease.Attrs{}, fmt.Errorf("%s backend (IPv6): %w", be.Type(), err)
		}
	}
	return a, nil
}

// ErrSiteBackend is returned for a site on a backend that cannot publish one (not an
// encap.SitePublisher).
var ErrSiteBackend = factory.ErrSiteBackend

// setSite puts our site into attrs: --site, else (Kubernetes mode, on a backend that
// publishes sites) the node's label. A host with a site reaches the hosts of its site
// on its interface's address (SiteIP) and the others on evidence (direct, through
// NAT, or relayed: the backend chooses); a site never means NAT by itself, only
// --behind-nat says our public address is dead from outside. Only a backend whose
// peers learn a NAT's address from packets they authenticate can carry that (an
// encap.SitePublisher); --site on another backend is refused, a site label ignored.
func (d *daemon) setSite(ctx context.Context, mgr lease.Manager, be encap.Backend, ext encap.ExternalInterface,
	attrs *lease.Attrs) error {
	site := d.cfg.Site
	sp, sites := be.(encap.SitePublisher)
	if ss, ok := mgr.(lease.SiteSource); ok && site == "" && sites {
		var err error
		if site, err = ss.Site(ctx); err != nil {
			return err
		}
	}
	if site == "" {
		if d.cfg.BehindNAT {
			return fmt.Errorf("--behind-nat: %w", ErrNATWithoutSite)
		}
		return nil
	}
	if !sites {
		return fmt.Errorf("site %q: %w: the %s backend's packets carry no authentication, so a peer cannot learn "+
			"a NAT's address from them, and hosts behind NAT could not be reached (see docs/sites.md)", site, ErrSiteBackend, be.Type())
	}
	sp.PublishSite(attrs, site, ext, d.cfg.BehindNAT)
	d.log.Info("in a site", zap.String("site", attrs.Site), zap.Stringer("site-ip", attrs.SiteIP), zap.Bool("behind-nat", attrs.NAT))
	return nil
}

// ErrNATWithoutSite is --behind-nat without a site: the hosts that may dial us are
// those of our site, so it needs one.
var ErrNATWithoutSite = errors.New("needs a site (--site, or the node's site label)")

// keepOutside publishes our NAT's outside address in our lease whenever the backend
// learns a new one, until ctx ends: peers behind another NAT dial it there.
func (d *daemon) keepOutside(ctx context.Context, mgr lease.Manager, ol encap.OutsideLearner) {
	r, ok := mgr.(lease.Republisher)
	if !ok {
		return
	}
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		out := ol.Outside()
		d.republishMu.Lock()
		held := d.held.Load()
		if held == nil || held.Attrs.Site == "" || held.Attrs.Outside == out {
			d.republishMu.Unlock()
			continue
		}
		next := *held
		next.Attrs.Outside = out
		d.held.Store(&next)
		d.republishMu.Unlock()
		d.log.Info("publishing our NAT's outside address", zap.Stringer("outside", out))
		r.Republish(next.Attrs)
	}
}
