package encap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/lease"
)

// wireguardType is the BackendType of the wireguard backend's leases.
const wireguardType = "wireguard"

// The wireguard backend's devices, as flanneld names them: flannel-wg carries IPv4
// (or both families in the single-device modes), flannel-wg-v6 IPv6 in Mode
// "separate".
const (
	WireGuardDevice   = "flannel-wg"
	WireGuardDeviceV6 = "flannel-wg-v6"
)

// wgOverhead is what flanneld takes from the MTU for WireGuard: a 40-byte IPv6 header
// (the longer of the two), 8 bytes of UDP, 4 of type, 4 of key index, 8 of nonce and
// 16 of authentication tag.
const wgOverhead = 80

// DefaultWireGuardKeyFile is where flanneld keeps the private key (WIREGUARD_KEY_FILE
// replaces it).
const DefaultWireGuardKeyFile = "/run/flannel/wgkey"

// DefaultWireGuardSocketDir is where wireguard-go and `wg` put and look for the UAPI
// sockets of userspace devices.
const DefaultWireGuardSocketDir = "/var/run/wireguard"

// The implementations of a WireGuard device (WireGuardTuning.Device, Backend.Device).
const (
	WireGuardAuto      = "auto"      // the kernel's when it has WireGuard, else userspace
	WireGuardKernel    = "kernel"    // the kernel's only
	WireGuardUserspace = "userspace" // wireguard-go's, in weftd
)

// The Modes of flanneld's wireguard backend.
const (
	wgSeparate = "separate" // flannel-wg for IPv4, flannel-wg-v6 for IPv6
	wgModeAuto = "auto"     // one device; each peer reached over the family selectMode picks
	wgModeIPv4 = "ipv4"     // one device; peers reached over IPv4
	wgModeIPv6 = "ipv6"     // one device; peers reached over IPv6
)

// wireguardOptions are the options of the Backend object, as flanneld v0.28.10 reads
// them, and Device (weft only; flanneld ignores it).
type wireguardOptions struct {
	ListenPort   int
	ListenPortV6 int
	MTU          int
	PSK          string
	// PersistentKeepaliveInterval is in seconds (a JSON number); 0 is off.
	PersistentKeepaliveInterval int
	Mode                        string
	Device                      string
}

// WireGuardTuning is how weftd's environment tunes the wireguard backend.
type WireGuardTuning struct {
	// Device, when set, replaces Backend.Device: auto, kernel or userspace.
	Device string
	// SocketDir is where the UAPI sockets of userspace devices go
	// (DefaultWireGuardSocketDir when empty).
	SocketDir string
	// KeyFile is the private key's file (DefaultWireGuardKeyFile when empty).
	KeyFile string
}

// wgLeaseData is the BackendData (and BackendV6Data) of a wireguard lease.
type wgLeaseData struct {
	PublicKey string
	Port      uint16
}

// wgDevice is a WireGuard device: the kernel's, configured over generic netlink, or
// wireguard-go's in weftd.
type wgDevice interface {
	Name() string
	// Kind is WireGuardKernel or WireGuardUserspace.
	Kind() string
	// Link is the device's network interface.
	Link() (netlink.Link, error)
	Configure(cfg wgtypes.Config) error
	// Close removes the device (and its UAPI socket).
	Close() error
}

// wgPeerConf is what one device gets for one peer lease.
type wgPeerConf struct {
	key      wgtypes.Key
	endpoint netip.AddrPort
	allowed  []netip.Prefix
}

// wireGuard is flannel's "wireguard" backend: a WireGuard device per address family
// (Mode "separate") or one for both, whose peers are the other hosts' leases: each
// peer's AllowedIPs are its subnets and its endpoint PublicIP:Port from its lease.
// The device has our subnet's first address as a host address, and the route to the
// whole network, as flanneld's has; WireGuard picks the peer by AllowedIPs.
type wireGuard struct {
	cfg       *lease.Config
	opts      wireguardOptions
	ext       ExternalInterface
	log       *zap.Logger
	device    string // WireGuardAuto, WireGuardKernel or WireGuardUserspace
	socketDir string
	keyFile   string
	priv      wgtypes.Key
	psk       *wgtypes.Key
	keepalive time.Duration

	mu sync.Mutex
	// devs[0] is flannel-wg, devs[1] flannel-wg-v6 (Mode "separate" with IPv6 only).
	devs [2]wgDevice
	// drops counts what the userspace devices dropped (wireguard_drops.go).
	drops wgDropCounts
	own   lease.Lease
	// applied is what each device has per peer lease (by peerKey); owner says which
	// lease a public key is configured for on each device, so that a key that moved
	// to another lease is not removed with the old one.
	applied map[netip.Prefix][2]*wgPeerConf
	owner   [2]map[wgtypes.Key]netip.Prefix
	// repairs counts what Run put back, by object ("device", "route").
	repairs map[string]uint64
}

// NewWireGuard returns the wireguard backend. It reads (or makes, once) the private
// key; the devices are made by BackendData, before the lease is acquired, as
// flanneld makes them.
func NewWireGuard(cfg *lease.Config, ext ExternalInterface, tuning WireGuardTuning, log *zap.Logger) (Backend, error) {
	o := wireguardOptions{ListenPort: 51820, ListenPortV6: 51821, MTU: ext.MTU, Mode: wgSeparate, Device: WireGuardAuto}
	if err := decodeOptions(wireguardType, cfg.Backend, &o); err != nil {
		return nil, err
	}
	if tuning.Device != "" {
		o.Device = tuning.Device
	}
	switch o.Mode {
	case wgSeparate, wgModeAuto, wgModeIPv4, wgModeIPv6:
	default:
		return nil, fmt.Errorf("%w: wireguard backend: Mode %q is not separate, auto, ipv4 or ipv6", ErrBadOption, o.Mode)
	}
	switch o.Device {
	case WireGuardAuto, WireGuardKernel, WireGuardUserspace:
	default:
		return nil, fmt.Errorf("%w: wireguard backend: Device %q is not auto, kernel or userspace", ErrBadOption, o.Device)
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"ListenPort", o.ListenPort}, {"ListenPortV6", o.ListenPortV6}} {
		if p.v < 1 || p.v > 65535 {
			return nil, fmt.Errorf("%w: wireguard backend: %s %d is not in 1-65535", ErrBadOption, p.name, p.v)
		}
	}
	if o.MTU-wgOverhead < 576 {
		return nil, fmt.Errorf("%w: wireguard backend: MTU %d leaves %d for the device, less than 576", ErrBadOption, o.MTU, o.MTU-wgOverhead)
	}
	if o.PersistentKeepaliveInterval < 0 || o.PersistentKeepaliveInterval > 65535 {
		return nil, fmt.Errorf("%w: wireguard backend: PersistentKeepaliveInterval %d is not in 0-65535 (seconds)", ErrBadOption, o.PersistentKeepaliveInterval)
	}
	w := &wireGuard{
		cfg: cfg, opts: o, ext: ext, log: log, device: o.Device,
		socketDir: tuning.SocketDir, keyFile: tuning.KeyFile,
		keepalive: time.Duration(o.PersistentKeepaliveInterval) * time.Second,
		applied:   map[netip.Prefix][2]*wgPeerConf{},
		owner:     [2]map[wgtypes.Key]netip.Prefix{{}, {}},
		repairs:   map[string]uint64{},
	}
	if w.socketDir == "" {
		w.socketDir = DefaultWireGuardSocketDir
	}
	if w.keyFile == "" {
		w.keyFile = DefaultWireGuardKeyFile
	}
	if o.PSK != "" {
		psk, err := wgtypes.ParseKey(o.PSK)
		if err != nil {
			return nil, fmt.Errorf("%w: wireguard backend: PSK: %w", ErrBadOption, err)
		}
		w.psk = &psk
	}
	priv, made, err := loadOrMakeKey(w.keyFile)
	if err != nil {
		return nil, fmt.Errorf("wireguard backend: private key: %w", err)
	}
	w.priv = priv
	log.Info("WireGuard private key", zap.String("file", w.keyFile), zap.Bool("made", made),
		zap.Stringer("public-key", priv.PublicKey()))
	return w, nil
}

// loadOrMakeKey reads the private key in path, base64 as `wg genkey` writes it; when
// there is no file, it makes a key and writes it there (mode 0400), once and for all.
func loadOrMakeKey(path string) (wgtypes.Key, bool, error) {
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		k, err := wgtypes.ParseKey(strings.TrimSpace(string(data)))
		if err != nil {
			return wgtypes.Key{}, false, fmt.Errorf("%s: %w", path, err)
		}
		return k, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return wgtypes.Key{}, false, err
	}
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return wgtypes.Key{}, false, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return wgtypes.Key{}, false, err
	}
	// Written aside and renamed: a crash never leaves half a key behind.
	f, err := os.CreateTemp(dir, ".wgkey-")
	if err != nil {
		return wgtypes.Key{}, false, err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	_, err = f.WriteString(k.String() + "\n")
	if err == nil {
		err = f.Chmod(0o400)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Link, not rename: a key another process wrote meanwhile is kept.
		err = os.Link(tmp, path)
	}
	if errors.Is(err, fs.ErrExist) {
		return loadOrMakeKey(path)
	}
	if err != nil {
		return wgtypes.Key{}, false, err
	}
	return k, true, nil
}

// Type is "wireguard".
func (w *wireGuard) Type() string { return wireguardType }

// MTU is the Backend's MTU (the external interface's by default) less the WireGuard
// overhead, as flanneld gives it; the devices have the same.
func (w *wireGuard) MTU() int { return w.opts.MTU - wgOverhead }

// single reports whether one device carries both families (every Mode but separate).
func (w *wireGuard) single() bool { return w.opts.Mode != wgSeparate }

// devFor is the index in devs of the device carrying family f.
func (w *wireGuard) devFor(f family) int {
	if f.is6() && !w.single() {
		return 1
	}
	return 0
}

// open makes the devices the config needs, once.
func (w *wireGuard) open() error {
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
		ws = append(ws, want{0, WireGuardDevice, w.opts.ListenPort})
	default:
		if v4(w.cfg).on() {
			ws = append(ws, want{0, WireGuardDevice, w.opts.ListenPort})
		}
		if v6(w.cfg).on() {
			ws = append(ws, want{1, WireGuardDeviceV6, w.opts.ListenPortV6})
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
		if err := d.Configure(wgtypes.Config{PrivateKey: &w.priv, ListenPort: &port, ReplacePeers: true}); err != nil {
			_ = d.Close()
			return fmt.Errorf("device %s: %w", x.name, err)
		}
		w.devs[x.i] = d
		w.log.Info("WireGuard device ready", zap.String("device", x.name), zap.String("implementation", d.Kind()),
			zap.Int("listen-port", port), zap.Int("mtu", w.MTU()))
	}
	return nil
}

// BackendData makes the devices (once) and returns {"PublicKey","Port"} of the IPv4
// side; nil on a network without IPv4.
func (w *wireGuard) BackendData(context.Context) (json.RawMessage, error) {
	if err := w.open(); err != nil {
		return nil, err
	}
	if !v4(w.cfg).on() {
		return nil, nil
	}
	return json.Marshal(wgLeaseData{PublicKey: w.priv.PublicKey().String(), Port: uint16(w.opts.ListenPort)})
}

// BackendV6Data is the IPv6 side's data: ListenPortV6 in every Mode, as flanneld
// publishes it.
func (w *wireGuard) BackendV6Data(context.Context) (json.RawMessage, error) {
	if !v6(w.cfg).on() {
		return nil, nil
	}
	return json.Marshal(wgLeaseData{PublicKey: w.priv.PublicKey().String(), Port: uint16(w.opts.ListenPortV6)})
}

// Register gives each device our subnet's first address (/32, /128) and the route to
// the network, and sets it up.
func (w *wireGuard) Register(ctx context.Context, own lease.Lease) error {
	if err := w.open(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.own = own
	var errs []error
	for _, f := range []family{v4(w.cfg), v6(w.cfg)} {
		if f.on() {
			errs = append(errs, w.setUp(f))
		}
	}
	return errors.Join(errs...)
}

// setUp gives the device of family f our subnet's first address and the route to the
// network, and sets it up. w.mu is held.
func (w *wireGuard) setUp(f family) error {
	sn := f.subnet(w.own)
	if !sn.IsValid() {
		return fmt.Errorf("the lease has no subnet of the network %v", f.network)
	}
	d := w.devs[w.devFor(f)]
	link, err := d.Link()
	if err != nil {
		return fmt.Errorf("device %s: %w", d.Name(), err)
	}
	if err := setWGAddr(link, f, netip.PrefixFrom(sn.Addr(), f.hostBits())); err != nil {
		return fmt.Errorf("device %s: %w", d.Name(), err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("device %s: set up: %w", d.Name(), err)
	}
	return wgRoute(link, f.network)
}

// setWGAddr puts addr on link and removes the other addresses of family f that are
// in its network (IPv6: every other one but link-local), as flanneld does.
func setWGAddr(link netlink.Link, f family, addr netip.Prefix) error {
	have, err := netlink.AddrList(link, f.nl)
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
		case f.is6() && p.IsLinkLocalUnicast():
		case f.is6() || f.network.Contains(p):
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

// HandleEvents adds, changes and removes the peers of the leases in events.
func (w *wireGuard) HandleEvents(_ context.Context, events []lease.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range events {
		l := ev.Lease
		key := peerKey(l)
		if !key.IsValid() || key == peerKey(w.own) || !inScope(w.cfg, l) {
			continue
		}
		log := w.log.With(zap.Stringer("subnet", key), zap.Stringer("public-ip", l.Attrs.PublicIP))
		var want [2]*wgPeerConf
		if ev.Type == lease.Added {
			if l.Attrs.BackendType != wireguardType {
				log.Warn("ignoring a lease that is not a wireguard lease", zap.String("backend-type", l.Attrs.BackendType))
			} else {
				var err error
				if want, err = w.peerConfs(l); err != nil {
					log.Error("cannot add the peer", zap.Error(err))
					continue
				}
			}
		}
		w.apply(key, want, log)
	}
}

// peerConfs is what each device should have for lease l, as flanneld computes it.
func (w *wireGuard) peerConfs(l lease.Lease) ([2]*wgPeerConf, error) {
	var out [2]*wgPeerConf
	type side struct {
		f    family
		data wgLeaseData
		ep   netip.AddrPort
		sn   netip.Prefix
	}
	var sides []side
	for _, f := range []family{v4(w.cfg), v6(w.cfg)} {
		sn := f.subnet(l)
		if !f.fits(sn) {
			continue
		}
		var d wgLeaseData
		raw := f.backendData(l)
		if len(raw) == 0 {
			return out, fmt.Errorf("the lease has no BackendData for %v", sn)
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return out, fmt.Errorf("BackendData for %v: %w", sn, err)
		}
		port := d.Port
		if port == 0 { // an older flanneld: our own port
			port = uint16(w.opts.ListenPort)
			if f.is6() && !w.single() {
				port = uint16(w.opts.ListenPortV6)
			}
		}
		var ep netip.AddrPort
		if pub := f.publicIP(l); pub.IsValid() && !pub.IsUnspecified() {
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
		if s.f.is6() {
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
func (w *wireGuard) selectMode(l lease.Lease) string {
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
func (w *wireGuard) apply(key netip.Prefix, want [2]*wgPeerConf, log *zap.Logger) {
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
			zap.Stringer("endpoint", n.endpoint), zap.Any("allowed-ips", n.allowed))
		// As flanneld does on each peer, route the network again (put back if deleted).
		if link, err := d.Link(); err == nil {
			for _, f := range []family{v4(w.cfg), v6(w.cfg)} {
				if f.on() && w.devFor(f) == i {
					if err := wgRoute(link, f.network); err != nil {
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

// peerConfig is the device's configuration of peer n.
func (w *wireGuard) peerConfig(n *wgPeerConf) wgtypes.PeerConfig {
	allowed := make([]net.IPNet, len(n.allowed))
	for j, p := range n.allowed {
		allowed[j] = *ipconv.IPNet(p)
	}
	keepalive := w.keepalive
	return wgtypes.PeerConfig{
		PublicKey: n.key, PresharedKey: w.psk, PersistentKeepaliveInterval: &keepalive,
		Endpoint: net.UDPAddrFromAddrPort(n.endpoint), ReplaceAllowedIPs: true, AllowedIPs: allowed,
	}
}

// Close removes the devices (and the userspace devices' UAPI sockets), as flanneld
// removes its devices when it stops.
func (w *wireGuard) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for i, d := range w.devs {
		if d != nil {
			errs = append(errs, d.Close())
			w.devs[i] = nil
		}
	}
	return errors.Join(errs...)
}

// Report returns the number of other hosts' leases the devices have a peer for,
// what Run put back, each device's implementation and the userspace devices' drops.
func (w *wireGuard) Report() Report {
	w.mu.Lock()
	defer w.mu.Unlock()
	devs := map[string]string{}
	for _, d := range w.devs {
		if d != nil {
			devs[d.Name()] = d.Kind()
		}
	}
	return Report{Peers: len(w.applied), Repairs: maps.Clone(w.repairs),
		WireGuard: &WireGuardReport{Devices: devs, Drops: w.drops.snapshot()}}
}
