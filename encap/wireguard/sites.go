package wireguard

import (
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

// natKeepalive is the PersistentKeepaliveInterval a host behind NAT gives the peers it
// dials (unless the Backend sets one): it keeps the NAT's mapping, and so the way
// back, open.
const natKeepalive = 25 * time.Second

// How we reach a peer, by sites (lease.Attrs Site, SiteIP, NAT). Without a site on
// either side every peer is reachDirect on its PublicIP, as in flanneld.
type reach int

const (
	reachDirect  reach = iota // we dial its endpoint
	reachSite                 // same site: we dial its SiteIP
	reachLearned              // it is behind NAT and dials us: its endpoint is the one WireGuard saw
	reachRelay                // both behind NAT in other sites: through a relay
)

// reachOf is how we reach peer l.
func (w *backend) reachOf(l lease.Lease) reach {
	own, p := w.own.Attrs, l.Attrs
	switch {
	case own.Site != "" && p.Site == own.Site && p.SiteIP.IsValid():
		return reachSite
	case !p.NAT:
		return reachDirect
	case !own.NAT:
		return reachLearned
	}
	return reachRelay
}

// bySite adjusts confs, lease l's peer on each device, to how we reach l: another
// endpoint in the same site, none configured for a peer behind NAT, and the NAT's
// keepalive from a host behind NAT. It reports false for a peer reached through a
// relay (then it has no peer of its own on the devices).
func (w *backend) bySite(l lease.Lease, confs [2]*wgPeerConf) bool {
	r := w.reachOf(l)
	if r == reachRelay {
		return false
	}
	for _, c := range confs {
		if c == nil {
			continue
		}
		switch r {
		case reachSite:
			if c.endpoint.Addr().Is4() == l.Attrs.SiteIP.Is4() {
				c.endpoint = netip.AddrPortFrom(l.Attrs.SiteIP, c.endpoint.Port())
			}
		case reachLearned:
			c.learn = true
		}
		if w.own.Attrs.NAT && r != reachSite && w.keepalive == 0 {
			c.keepalive = natKeepalive
		}
	}
	return true
}

// reroute chooses the relay for the peers reached through one: a peer dialable by us
// and by them (not behind NAT), not found down by the probes, the lowest subnet first
// (all down: the lowest anyway). The relay's peer gets their subnets in its AllowedIPs;
// a relay given up gets its own back. w.mu is held.
func (w *backend) reroute() {
	var subnets []netip.Prefix
	for _, l := range w.relayed {
		subnets = append(subnets, l.Subnet, l.IPv6Subnet)
	}
	subnets = slices.DeleteFunc(subnets, func(p netip.Prefix) bool { return !p.IsValid() || p.Bits() == 0 })
	slices.SortFunc(subnets, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	relay := netip.Prefix{}
	if len(subnets) > 0 {
		var any netip.Prefix
		for key, l := range w.leases {
			if l.Attrs.NAT || w.base[key] == ([2]*wgPeerConf{}) {
				continue
			}
			if !any.IsValid() || key.Addr().Less(any.Addr()) {
				any = key
			}
			if !w.down[key] && (!relay.IsValid() || key.Addr().Less(relay.Addr())) {
				relay = key
			}
		}
		if !relay.IsValid() {
			relay = any
		}
	}
	if relay == w.relay && slices.Equal(subnets, w.relaySubnets) {
		return
	}
	old := w.relay
	w.relay, w.relaySubnets = relay, subnets
	if old.IsValid() && old != relay {
		w.apply(old, w.withRelayed(old), w.log.With(zap.Stringer("subnet", old)))
	}
	if relay.IsValid() {
		w.log.Info("relaying the peers behind NAT in other sites", zap.Stringer("relay", relay), zap.Any("subnets", subnets))
		w.apply(relay, w.withRelayed(relay), w.log.With(zap.Stringer("subnet", relay)))
	} else if len(subnets) > 0 {
		w.log.Warn("no relay for the peers behind NAT in other sites: no host both can dial", zap.Any("subnets", subnets))
	}
}

// withRelayed is peer key's configuration: its own, and on the relay the relayed
// subnets too (on the device of their family).
func (w *backend) withRelayed(key netip.Prefix) [2]*wgPeerConf {
	base := w.base[key]
	if key != w.relay {
		return base
	}
	var out [2]*wgPeerConf
	for i, c := range base {
		if c == nil {
			continue
		}
		cc := *c
		cc.allowed = slices.Clone(c.allowed)
		for _, sn := range w.relaySubnets {
			if w.devFor(w.family(sn)) == i {
				cc.allowed = append(cc.allowed, sn)
			}
		}
		out[i] = &cc
	}
	return out
}

// PeerState is told by the probes whether a peer is reachable: a relay found down is
// given up for another.
func (w *backend) PeerState(subnet netip.Prefix, up bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := subnet
	for k, l := range w.leases {
		if l.Subnet == subnet || l.IPv6Subnet == subnet {
			key = k
		}
	}
	if w.down[key] == !up {
		return
	}
	if up {
		delete(w.down, key)
	} else {
		w.down[key] = true
	}
	w.reroute()
}
