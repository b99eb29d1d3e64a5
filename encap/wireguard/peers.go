package wireguard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/paths/way"
	"github.com/weftnet/weft/transport/relay"
)

// wgLeaseData is the BackendData (and BackendV6Data) of a wireguard lease.
type wgLeaseData struct {
	PublicKey string
	Port      uint16
}

// wgPeerConf is what one device gets for one peer lease.
type wgPeerConf struct {
	key      wgtypes.Key
	endpoint netip.AddrPort
	allowed  []netip.Prefix
	// learn leaves the endpoint to WireGuard: a peer behind NAT, whose endpoint is
	// where its authenticated packets come from (endpoint is then only its lease's).
	learn bool
	// keepalive, when set, replaces the Backend's PersistentKeepaliveInterval.
	keepalive time.Duration
}

// HandleEvents adds, changes and removes the peers of the leases in events.
func (w *backend) HandleEvents(_ context.Context, events []lease.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var resume []netip.Prefix // new peers an earlier weftd kept a way for
	for _, ev := range events {
		l := ev.Lease
		key := encap.PeerKey(l)
		if !key.IsValid() || key == encap.PeerKey(w.own) || !encap.InScope(w.cfg, l) {
			continue
		}
		log := w.log.With(zap.Stringer("subnet", key), zap.Stringer("public-ip", l.Attrs.PublicIP))
		var want [2]*wgPeerConf
		old := w.leases[key]
		delete(w.leases, key)
		w.atPath = nil
		if ev.Type == lease.Added {
			if l.Attrs.BackendType != wireguardType {
				log.Warn("ignoring a lease that is not a wireguard lease", zap.String("backend-type", l.Attrs.BackendType))
			} else {
				var err error
				if want, err = w.peerConfs(l); err != nil {
					log.Error("cannot add the peer", zap.Error(err))
					continue
				}
				w.leases[key] = l
				w.bySite(l, want)
			}
		}
		if old := w.base[key][0]; old != nil && (want[0] == nil || want[0].key != old.key) && w.node != nil {
			w.node.Forget(relay.Key(old.key))
		}
		if want == ([2]*wgPeerConf{}) {
			delete(w.base, key)
			w.forgetWay(key, old)
		} else {
			w.base[key] = want
			if !w.chooses(l) {
				w.forgetWay(key, old)
			} else if w.ways[key] == nil {
				w.ways[key] = way.New(time.Now())
				if want[0] != nil {
					if _, ok := w.keptWays[want[0].key]; ok {
						resume = append(resume, key)
					}
				}
			} else {
				w.newOutside(key, old, l)
			}
		}
		w.apply(key, w.onWay(key, want), log)
	}
	// After the whole batch: a relay's lease may come after its peer's.
	for _, key := range resume {
		ws, confs := w.ways[key], w.base[key]
		if ws != nil && confs[0] != nil && w.resumeWay(key, confs[0].key, ws) {
			w.apply(key, w.onWay(key, confs), w.log.With(zap.Stringer("subnet", key)))
		}
	}
	w.dropLeftPeers()
	// A device that took over from a running weftd's reads its TUN now that it has
	// its peers.
	for _, d := range w.devs {
		if h, ok := d.(handsOver); ok {
			h.attach()
		}
	}
}

// dropLeftPeers removes, once, the peers a device taken over with its peers (kept)
// has that no lease gives it: hosts that left while no weftd ran. The daemon's first
// HandleEvents has every lease. w.mu is held.
func (w *backend) dropLeftPeers() {
	for i, d := range w.devs {
		if d == nil || !w.kept[i] {
			continue
		}
		w.kept[i] = false
		have, err := d.Peers()
		if err != nil {
			w.log.Warn("reading the peers of the device taken over", zap.String("device", d.Name()), zap.Error(err))
			continue
		}
		want := map[wgtypes.Key]bool{}
		for _, c := range w.applied {
			if c[i] != nil {
				want[c[i].key] = true
			}
		}
		var gone []wgtypes.PeerConfig
		for k := range have {
			if !want[k] {
				gone = append(gone, wgtypes.PeerConfig{PublicKey: k, Remove: true})
			}
		}
		if len(gone) == 0 {
			continue
		}
		if err := d.Configure(wgtypes.Config{Peers: gone}); err != nil {
			w.log.Warn("removing the peers no lease names", zap.String("device", d.Name()), zap.Error(err))
			continue
		}
		w.log.Info("removed the peers no lease names from the device taken over", zap.String("device", d.Name()), zap.Int("peers", len(gone)))
	}
}

// peerConfs is what each device should have for lease l, as flanneld computes it.
func (w *backend) peerConfs(l lease.Lease) ([2]*wgPeerConf, error) {
	var out [2]*wgPeerConf
	type side struct {
		f    encap.Family
		data wgLeaseData
		ep   netip.AddrPort
		sn   netip.Prefix
	}
	var sides []side
	for _, f := range []encap.Family{encap.V4(w.cfg), encap.V6(w.cfg)} {
		sn := f.Subnet(l)
		if !f.Fits(sn) {
			continue
		}
		var d wgLeaseData
		raw := f.BackendData(l)
		if len(raw) == 0 {
			return out, fmt.Errorf("the lease has no BackendData for %v", sn)
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return out, fmt.Errorf("BackendData for %v: %w", sn, err)
		}
		port := d.Port
		if port == 0 { // an older flanneld: our own port
			port = uint16(w.opts.ListenPort)
			if f.Is6() && !w.single() {
				port = uint16(w.opts.ListenPortV6)
			}
		}
		var ep netip.AddrPort
		if pub := f.PublicIP(l); pub.IsValid() && !pub.IsUnspecified() {
			ep = netip.AddrPortFrom(pub, port)
		}
		sides = append(sides, side{f, d, ep, sn})
	}
	if len(sides) == 0 {
		return out, nil
	}
	if !w.single() {
		for _, s := range sides {
			k, err := wgtypes.ParseKey(s.data.PublicKey)
			if err != nil {
				return out, fmt.Errorf("PublicKey %q for %v: %w", s.data.PublicKey, s.sn, err)
			}
			if !s.ep.IsValid() {
				return out, fmt.Errorf("the lease has no public address for %v", s.sn)
			}
			out[w.devFor(s.f)] = &wgPeerConf{key: k, endpoint: s.ep, allowed: []netip.Prefix{s.sn}}
		}
		return out, nil
	}
	// One device: the last side's key (flanneld's), every subnet, the endpoint of
	// the family the Mode (or, for auto, selectMode) picks. The peer's one device
	// listens on its ListenPort over IPv6 too, not on the ListenPortV6 its
	// BackendV6Data names (flanneld dials that port, where nothing listens): the
	// IPv4 side's Port, or on an IPv6-only network our own ListenPort (the peers
	// share the network's config).
	c := &wgPeerConf{}
	var ep4, ep6 netip.AddrPort
	port := uint16(w.opts.ListenPort)
	for _, s := range sides {
		k, err := wgtypes.ParseKey(s.data.PublicKey)
		if err != nil {
			return out, fmt.Errorf("PublicKey %q for %v: %w", s.data.PublicKey, s.sn, err)
		}
		c.key = k
		c.allowed = append(c.allowed, s.sn)
		if s.f.Is6() {
			ep6 = s.ep
		} else {
			ep4 = s.ep
			port = s.ep.Port()
		}
	}
	if ep6.IsValid() {
		ep6 = netip.AddrPortFrom(ep6.Addr(), port)
	}
	mode := w.opts.Mode
	if mode == wgModeAuto {
		mode = w.selectMode(l)
	}
	c.endpoint = ep4
	if mode == wgModeIPv6 {
		c.endpoint = ep6
	}
	if !c.endpoint.IsValid() {
		return out, fmt.Errorf("the lease has no public address of the family Mode %s picks", mode)
	}
	out[0] = c
	return out, nil
}

// selectMode is flanneld's choice of family for a peer in Mode auto: IPv4 unless the
// peer has an IPv6 address and only IPv6 is public on both sides, or (weft only;
// flanneld then dials 0.0.0.0) the peer has no IPv4 address.
func (w *backend) selectMode(l lease.Lease) string {
	ip4, ip6 := l.Attrs.PublicIP, l.Attrs.PublicIPv6
	switch {
	case !ip6.IsValid():
		return wgModeIPv4
	case !ip4.IsValid() || ip4.IsUnspecified():
		return wgModeIPv6
	case !ip4.IsPrivate() && w.ext.PublicIP.IsValid():
		return wgModeIPv4
	case !ip6.IsPrivate() && w.ext.PublicIPv6.IsValid() && !w.ext.PublicIPv6.IsPrivate():
		return wgModeIPv6
	}
	return wgModeIPv4
}

// apply makes each device's peer for lease key what want says (nil: none).
func (w *backend) apply(key netip.Prefix, want [2]*wgPeerConf, log *zap.Logger) {
	old := w.applied[key]
	for i, d := range w.devs {
		if d == nil {
			continue
		}
		o, n := old[i], want[i]
		if o != nil && (n == nil || n.key != o.key) && w.owner[i][o.key] == key {
			err := d.Configure(wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: o.key, Remove: true}}})
			if err != nil {
				log.Error("removing the peer", zap.String("device", d.Name()), zap.Error(err))
			} else {
				log.Info("peer removed", zap.String("device", d.Name()), zap.Stringer("public-key", o.key))
			}
			delete(w.owner[i], o.key)
		}
		if n == nil {
			continue
		}
		if o.same(n) && w.owner[i][n.key] == key && w.hasPeer(d, n.key) {
			// Nothing to change: configuring it again would reset the endpoint the
			// device roamed to (where the peer's datagrams come from) to the lease's,
			// and what we tell others of where we see them (seenAt) with it.
			continue
		}
		err := d.Configure(wgtypes.Config{Peers: []wgtypes.PeerConfig{w.peerConfig(n)}})
		var gone netlink.LinkNotFoundError
		if _, lerr := d.Link(); err != nil && errors.As(lerr, &gone) {
			// Deleted from under us: kept, the device made again (Run) gets it.
			log.Warn("the device is gone; the peer goes on the one made again", zap.String("device", d.Name()), zap.Error(err))
			w.owner[i][n.key] = key
			continue
		}
		if err != nil {
			log.Error("adding the peer", zap.String("device", d.Name()), zap.Error(err))
			want[i] = nil
			if o != nil && o.key == n.key {
				want[i] = o // the old peer stays as it was
			}
			continue
		}
		w.owner[i][n.key] = key
		log.Info("peer added", zap.String("device", d.Name()), zap.Stringer("public-key", n.key),
			zap.Stringer("endpoint", n.endpoint), zap.Bool("endpoint-learnt", n.learn), zap.Any("allowed-ips", n.allowed))
		w.resendInitiation(d, o, n, log)
		// As flanneld does on each peer, route the network again (put back if deleted).
		if link, err := d.Link(); err == nil {
			for _, f := range []encap.Family{encap.V4(w.cfg), encap.V6(w.cfg)} {
				if f.On() && w.devFor(f) == i {
					if err := wgRoute(link, f.Network); err != nil {
						log.Warn("routing the network", zap.Error(err))
					}
				}
			}
		}
	}
	if want == [2]*wgPeerConf{} {
		delete(w.applied, key)
	} else {
		w.applied[key] = want
	}
}

// same reports whether c and n configure a device's peer alike.
func (c *wgPeerConf) same(n *wgPeerConf) bool {
	return c != nil && n != nil && c.key == n.key && c.endpoint == n.endpoint && c.learn == n.learn &&
		c.keepalive == n.keepalive && slices.Equal(c.allowed, n.allowed)
}

// hasPeer reports whether device d has peer k now (one read of the device).
func (w *backend) hasPeer(d wgDevice, k wgtypes.Key) bool {
	peers, err := d.Peers()
	if err != nil {
		return false
	}
	_, ok := peers[k]
	return ok
}

// resendInitiation sends peer n's unanswered handshake initiation, sent to its old
// endpoint (o's) lately, to its new one at once, where the device can
// (initiationResender).
func (w *backend) resendInitiation(d wgDevice, o, n *wgPeerConf, log *zap.Logger) {
	r, ok := d.(initiationResender)
	if !ok || o == nil || o.key != n.key || n.learn || !o.endpoint.IsValid() || !n.endpoint.IsValid() || o.endpoint == n.endpoint {
		return
	}
	sent, err := r.ResendInitiation(o.endpoint, n.endpoint)
	switch {
	case err != nil:
		log.Warn("sending the handshake initiation again", zap.Stringer("endpoint", n.endpoint), zap.Error(err))
	case sent:
		log.Debug("handshake initiation sent again, to the new endpoint", zap.Stringer("from", o.endpoint), zap.Stringer("to", n.endpoint))
	}
}

// peerConfig is the device's configuration of peer n.
func (w *backend) peerConfig(n *wgPeerConf) wgtypes.PeerConfig {
	allowed := make([]net.IPNet, len(n.allowed))
	for j, p := range n.allowed {
		allowed[j] = *ipconv.IPNet(p)
	}
	keepalive := w.keepalive
	if n.keepalive > 0 {
		keepalive = n.keepalive
	}
	var ep *net.UDPAddr
	if !n.learn && n.endpoint.IsValid() {
		ep = net.UDPAddrFromAddrPort(n.endpoint)
	}
	return wgtypes.PeerConfig{
		PublicKey: n.key, PresharedKey: w.psk, PersistentKeepaliveInterval: &keepalive,
		Endpoint: ep, ReplaceAllowedIPs: true, AllowedIPs: allowed,
	}
}
