package wireguard

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/transport/relay"
	"github.com/weftnet/weft/transport/wgbind"
)

// wgDevice is a WireGuard device: the kernel's, configured over generic netlink, or
// wireguard-go's in weftd.
type wgDevice interface {
	Name() string
	// Kind is Kernel or Userspace.
	Kind() string
	// Link is the device's network interface.
	Link() (netlink.Link, error)
	Configure(cfg wgtypes.Config) error
	// Peers is what the device knows of its peers now: the endpoint in use (learnt
	// from packets when none was configured) and the last handshake, by public key.
	Peers() (map[wgtypes.Key]peerStatus, error)
	// Close stops using the device and leaves it, with its address and routes (and
	// the kernel's with its peers and sessions), for the next weftd; it removes the
	// UAPI socket.
	Close() error
	// Remove is Close, and deletes the device.
	Remove() error
	// Kept says the device was taken over from an earlier weftd with its peers (the
	// kernel's keeps them; wireguard-go's went with the process).
	Kept() bool
}

// inProcessRelay is a device in this process whose Bind carries the relayed peers'
// datagrams to and from the relay socket without the loopback legs (wireguard-go on
// weft's transport): it takes what the relay brings (relay.Device), and sends
// through r what it sends to a relayed peer.
type inProcessRelay interface {
	relay.Device
	SetRelay(r wgbind.Relay)
}

// initiationResender is a device that can send a peer's unanswered handshake
// initiation again to the peer's new endpoint at once (wireguard-go on weft's
// transport): a peer moved to a relay, or to its punched way, is answered there
// within a round trip rather than at the device's own retry, up to 5 s later.
type initiationResender interface {
	ResendInitiation(from, to netip.AddrPort) (bool, error)
	// Initiations counts the initiations sent again since the device was made, and
	// those it could not keep to send again.
	Initiations() wgbind.InitiationCounts
}

// peerStatus is what a device knows of one peer now.
type peerStatus struct {
	endpoint  netip.AddrPort
	handshake time.Time
}

// open makes the devices the config needs, once.
func (w *backend) open() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	type want struct {
		i    int
		name string
		port int
	}
	var ws []want
	switch {
	case w.single():
		ws = append(ws, want{0, Device, w.opts.ListenPort})
	default:
		if encap.V4(w.cfg).On() {
			ws = append(ws, want{0, Device, w.opts.ListenPort})
		}
		if encap.V6(w.cfg).On() {
			ws = append(ws, want{1, DeviceV6, w.opts.ListenPortV6})
		}
	}
	// The device an earlier weftd left that this config does not use (Mode or
	// IPv6 changed) goes.
	for i, name := range []string{Device, DeviceV6} {
		if w.devs[i] != nil || slices.ContainsFunc(ws, func(x want) bool { return x.name == name }) {
			continue
		}
		if l, err := netlink.LinkByName(name); err == nil && (l.Type() == "wireguard" || l.Type() == "tuntap") {
			if err := netlink.LinkDel(l); err != nil {
				w.log.Warn("removing a WireGuard device this config does not use", zap.String("device", name), zap.Error(err))
			} else {
				w.log.Info("removed a WireGuard device this config does not use", zap.String("device", name))
			}
		}
	}
	for _, x := range ws {
		if w.devs[x.i] != nil {
			continue
		}
		d, err := openWGDevice(x.name, w.MTU(), w.device, w.socketDir, w.drops.device(x.name), w.log)
		if err != nil {
			return fmt.Errorf("device %s: %w", x.name, err)
		}
		port := x.port
		// A device taken over keeps its peers, and their sessions, until the first
		// leases say which are gone (dropLeftPeers).
		w.kept[x.i] = d.Kept()
		if err := d.Configure(wgtypes.Config{PrivateKey: &w.priv, ListenPort: &port, ReplacePeers: !d.Kept()}); err != nil {
			_ = d.Close()
			return fmt.Errorf("device %s: %w", x.name, err)
		}
		w.devs[x.i] = d
		w.log.Info("WireGuard device ready", zap.String("device", x.name), zap.String("implementation", d.Kind()),
			zap.Int("listen-port", port), zap.Int("mtu", w.MTU()))
	}
	if w.node == nil && w.pathPort > 0 && w.devs[0] != nil {
		n, err := w.listenPath()
		if err != nil {
			// Without it every peer is direct, as in flanneld: worth a loud line, not a stop.
			w.log.Error("no path socket: peers outside our site are reached directly only, and this host relays for none", zap.Error(err))
			w.pathPort = -1
		} else {
			w.node = n
			w.relayInProcess()
			// Read at once, not from Run: in a hand-over the relays send here as soon
			// as the old weftd's socket is gone, and the old device's relayed peers
			// reach it through this one (Run came 0.2 s later in the sites lab).
			w.nodeRun.Go(func() { _ = n.Run(context.Background()) })
		}
	}
	if w.devs[0] != nil { // a socket passed on that we do not use: no path socket here
		closeFiles(w.taken)
		w.taken = nil
	}
	return nil
}

// listenPath opens the path socket, or goes on with the one the weftd before us
// passed on in a hand-over (TakeSockets): what reached it since that one stopped
// reading waits there, and is read now. w.mu is held.
func (w *backend) listenPath() (*relay.Node, error) {
	cfg := relay.Config{Port: w.pathPort, Private: w.priv, WGPort: w.opts.ListenPort,
		SeenAt: w.seenAt, Registrations: w.loadRelayed(), Log: w.log.Named("path")}
	defer func() {
		closeFiles(w.taken)
		w.taken = nil
	}()
	if f := w.taken[pathSocket]; f != nil {
		cfg.From = f
		n, err := relay.Listen(cfg)
		if err == nil {
			w.log.Info("going on with the path socket the weftd before us passed on", zap.Int("port", n.Port()))
			return n, nil
		}
		w.log.Warn("the path socket the weftd before us passed on does not fit: opening one", zap.Error(err))
		_ = f.Close() // our copy holds the port
		delete(w.taken, pathSocket)
		cfg.From = nil
	}
	return relay.Listen(cfg)
}

// relayInProcess joins the IPv4 device and the path socket without loopback legs
// where the device can (inProcessRelay): relayed TCP was a quarter of direct's with
// a loopback socket and a system call per datagram on each leg. w.mu is held.
func (w *backend) relayInProcess() {
	if w.node == nil {
		return
	}
	d, ok := w.devs[0].(inProcessRelay)
	if !ok {
		w.node.SetDevice(nil)
		return
	}
	w.node.SetDevice(d)
	d.SetRelay(w.node)
}

// seenAt is where the IPv4 device sees peer k's WireGuard: the path socket tells it
// to k when k says hello. It reads the chooser's last snapshot (keepSeen), without
// the backend's lock or a read of the device: a relay answers every host's hellos.
func (w *backend) seenAt(k relay.Key) netip.AddrPort {
	if m := w.seen.Load(); m != nil {
		return (*m)[wgtypes.Key(k)]
	}
	return netip.AddrPort{}
}

// seenFor is how recent a handshake must be for its endpoint to count as where we
// see a peer: WireGuard's session lifetime (REJECT_AFTER_TIME). An endpoint without
// one is only what we configured, not where the peer's datagrams come from.
const seenFor = 180 * time.Second

// keepSeen takes from status, the IPv4 device's peers now, where it sees each peer
// it handshook with lately, for seenAt. w.mu is held.
func (w *backend) keepSeen(status map[wgtypes.Key]peerStatus, now time.Time) {
	m := make(map[wgtypes.Key]netip.AddrPort, len(status))
	for k, st := range status {
		if st.endpoint.IsValid() && !st.handshake.IsZero() && now.Sub(st.handshake) < seenFor {
			m[k] = st.endpoint
		}
	}
	w.seen.Store(&m)
}

// setWGAddr puts addr on link and removes the other addresses of family f that are
// in its network (IPv6: every other one but link-local), as flanneld does.
func setWGAddr(link netlink.Link, f encap.Family, addr netip.Prefix) error {
	have, err := netlink.AddrList(link, f.NL)
	if err != nil {
		return fmt.Errorf("list addresses: %w", err)
	}
	found := false
	for _, a := range have {
		p, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		p = p.Unmap()
		switch {
		case netip.PrefixFrom(p, ones) == addr:
			found = true
		case f.Is6() && p.IsLinkLocalUnicast():
		case f.Is6() || f.Network.Contains(p):
			if err := netlink.AddrDel(link, &a); err != nil {
				return fmt.Errorf("remove address %v: %w", a.IPNet, err)
			}
		}
	}
	if found {
		return nil
	}
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: ipconv.IPNet(addr)}); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add address %v: %w", addr, err)
	}
	return nil
}

// wgRoute routes network to link (scope link), as flanneld does.
func wgRoute(link netlink.Link, network netip.Prefix) error {
	r := netlink.Route{LinkIndex: link.Attrs().Index, Scope: netlink.SCOPE_LINK, Dst: ipconv.IPNet(network)}
	if err := netlink.RouteReplace(&r); err != nil {
		return fmt.Errorf("route %v dev %s: %w", network, link.Attrs().Name, err)
	}
	return nil
}
