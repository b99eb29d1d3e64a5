package wireguard

import (
	"fmt"
	"maps"
	"net/netip"
	"strconv"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/paths/way"
)

// Paths lists a path per peer subnet on the devices: from our subnet's first
// address, which our device holds, to the peer's, which its device holds (flanneld's
// as weftd's), through the peer's endpoint (the one in use, learnt or configured),
// its NAT's outside address (punched), or the relay's path port (relayed), with why
// we took that way.
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
	for key, confs := range w.applied {
		ws := w.ways[key]
		for i, c := range confs {
			if c == nil {
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
				ep, pub := c.endpoint, w.leases[key].Attrs.PublicIP
				st, ok := status[c.key]
				if ok && st.endpoint.IsValid() {
					ep = st.endpoint
				}
				p := encap.Path{Backend: wireguardType, Subnet: sn, Overlay: sn.Masked().Addr(),
					Local: local.Masked().Addr(), MTU: w.MTU(), RouteMTU: w.mtus.Get(sn), LastHandshake: st.handshake}
				if i == 0 && sn.Addr().Is4() && ws != nil && ws.Way == way.Relay {
					// A relayed datagram carries the relay frame: the full-size probe is
					// the relayed route's MTU, and that route's MTU is ours, not a repair.
					p.MTU = w.relayedMTU()
					if p.RouteMTU == p.MTU {
						p.RouteMTU = 0
					}
				}
				if c.learn {
					// The lease's address of a peer that dials us is none we send to.
					pub = ep.Addr()
				}
				if ws != nil && i == 0 {
					p.Why = ws.Why
					switch ws.Way {
					case way.Punched:
						p.Punched, pub = true, ep.Addr()
					case way.Relay:
						// The underlay address probed is the relay's.
						p.Via, ep = ws.Relay, ws.RelayAddr
						pub = ep.Addr()
					}
				}
				p.PublicIP, p.Endpoint = pub, ep
				if ep.IsValid() {
					p.Proto = "UDP " + strconv.Itoa(int(ep.Port()))
				}
				out = append(out, p)
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
	if sn.Addr().Is4() && w.relayed(sn) && (mtu == 0 || mtu > w.relayedMTU()) {
		mtu = w.relayedMTU() // a repair given back, or above it: the relay frame still needs its room
	}
	if err := w.mtus.SetOn(link.Attrs().Index, sn, mtu); err != nil {
		return fmt.Errorf("device %s: %w", d.Name(), err)
	}
	return nil
}

var (
	_ encap.PathLister     = (*backend)(nil)
	_ encap.RouteMTUSetter = (*backend)(nil)
)
var (
	_ encap.PeerStateFollower  = (*backend)(nil)
	_ encap.FirstRoundFollower = (*backend)(nil)
	_ encap.ProbePaceFollower  = (*backend)(nil)
)
