package wireguard

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/kernel"
)

// Paths lists a path per peer subnet on the devices: from our subnet's first
// address, which our device holds, to the peer's, which its device holds (flanneld's
// as weftd's), through the peer's endpoint.
func (w *backend) Paths() []encap.Path {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]encap.Path, 0, len(w.applied))
	for _, confs := range w.applied {
		for _, c := range confs {
			if c == nil || !c.endpoint.IsValid() {
				continue
			}
			for _, sn := range c.allowed {
				local := w.own.Subnet
				if sn.Addr().Is6() {
					local = w.own.IPv6Subnet
				}
				if !local.IsValid() {
					continue
				}
				out = append(out, encap.Path{Backend: wireguardType, Subnet: sn, PublicIP: c.endpoint.Addr(),
					Overlay: sn.Masked().Addr(), Local: local.Masked().Addr(), Endpoint: c.endpoint,
					Proto: "UDP " + strconv.Itoa(int(c.endpoint.Port())), MTU: w.MTU(), RouteMTU: w.mtus[sn]})
			}
		}
	}
	return out
}

// SetRouteMTU gives the route to a peer's subnet on its device an MTU of its own (a
// route more specific than the network's); 0 removes that route.
func (w *backend) SetRouteMTU(sn netip.Prefix, mtu int) error {
	f := encap.V4(w.cfg)
	if sn.Addr().Is6() {
		f = encap.V6(w.cfg)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.devs[w.devFor(f)]
	if d == nil {
		return fmt.Errorf("no device for %v", sn)
	}
	link, err := d.Link()
	if err != nil {
		return fmt.Errorf("device %s: %w", d.Name(), err)
	}
	if err := kernel.SetLinkRouteMTU(link.Attrs().Index, sn, mtu); err != nil {
		return fmt.Errorf("device %s: %w", d.Name(), err)
	}
	if mtu > 0 {
		w.mtus[sn] = mtu
	} else {
		delete(w.mtus, sn)
	}
	return nil
}

var (
	_ encap.PathLister     = (*backend)(nil)
	_ encap.RouteMTUSetter = (*backend)(nil)
)
