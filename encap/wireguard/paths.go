package wireguard

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/kernel"
)

// Paths lists a path per peer subnet on the devices: from our subnet's first
// address, which our device holds, to the peer's, which its device holds (flanneld's
// as weftd's), through the peer's endpoint (the one in use, learnt or configured),
// or through the relay's for a peer reached through a relay.
func (w *backend) Paths() []encap.Path {
	w.mu.Lock()
	defer w.mu.Unlock()
	status := map[wgtypes.Key]peerStatus{}
	for _, d := range w.devs {
		if d != nil {
			if st, err := d.Peers(); err == nil {
				maps.Copy(status, st)
			}
		}
	}
	out := make([]encap.Path, 0, len(w.leases))
	add := func(sn netip.Prefix, pub netip.Addr, c *wgPeerConf, via netip.Prefix) {
		local := w.own.Subnet
		if sn.Addr().Is6() {
			local = w.own.IPv6Subnet
		}
		if !local.IsValid() || c == nil {
			return
		}
		ep := c.endpoint
		st, ok := status[c.key]
		if ok && st.endpoint.IsValid() {
			ep = st.endpoint
		}
		out = append(out, encap.Path{Backend: wireguardType, Subnet: sn, PublicIP: pub,
			Overlay: sn.Masked().Addr(), Local: local.Masked().Addr(), Endpoint: ep,
			Proto: "UDP " + strconv.Itoa(int(ep.Port())), MTU: w.MTU(), RouteMTU: w.mtus[sn],
			Via: via, LastHandshake: st.handshake})
	}
	for key, confs := range w.applied {
		for _, c := range confs {
			if c == nil {
				continue
			}
			for _, sn := range c.allowed {
				if key == w.relay && slices.Contains(w.relaySubnets, sn) {
					continue // a relayed subnet on the relay's peer: listed below
				}
				add(sn, w.leases[key].Attrs.PublicIP, c, netip.Prefix{})
			}
		}
	}
	for _, l := range w.relayed {
		relay := w.applied[w.relay]
		for _, sn := range []netip.Prefix{l.Subnet, l.IPv6Subnet} {
			if sn.IsValid() && sn.Bits() > 0 {
				add(sn, l.Attrs.PublicIP, relay[w.devFor(w.family(sn))], w.relay)
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
var _ encap.PeerStateFollower = (*backend)(nil)
