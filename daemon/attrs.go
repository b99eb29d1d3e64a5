package daemon

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
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

// ErrSiteBackend is returned for a site on a backend other than wireguard.
var ErrSiteBackend = errors.New("sites need the wireguard backend")

// setSite puts our site into attrs: --site, else (Kubernetes mode, wireguard) the
// node's label. A host with a site reaches the hosts of its site on its interface's
// address (SiteIP); without a public address of its own (dialable: --public-ip, or
// in Kubernetes mode the node-public-ip annotation) it is behind NAT, dialed by no
// host outside its site. Only wireguard can carry that: its peers learn a NAT's
// address from packets they authenticate, which udp's and vxlan's datagrams never
// are; --site on another backend is refused, a site label ignored.
func (d *daemon) setSite(ctx context.Context, mgr lease.Manager, be encap.Backend, ext encap.ExternalInterface,
	dialable bool, attrs *lease.Attrs) error {
	site := d.cfg.Site
	if ss, ok := mgr.(lease.SiteSource); ok && site == "" && be.Type() == "wireguard" {
		var err error
		if site, err = ss.Site(ctx); err != nil {
			return err
		}
	}
	if site == "" {
		return nil
	}
	if be.Type() != "wireguard" {
		return fmt.Errorf("site %q: %w: the %s backend's packets carry no authentication, so a peer cannot learn "+
			"a NAT's address from them, and hosts behind NAT could not be reached (see docs/sites.md)", site, ErrSiteBackend, be.Type())
	}
	attrs.Site, attrs.SiteIP, attrs.NAT = site, ext.IfaceIP, !dialable
	d.log.Info("in a site", zap.String("site", site), zap.Stringer("site-ip", ext.IfaceIP), zap.Bool("behind-nat", attrs.NAT))
	return nil
}
