// Package wireguard holds flannel's wireguard backend: its options, devices and
// lease data (wireguard.go), the private key (key.go), the devices of the kernel or of
// wireguard-go in weftd (device.go, device_linux.go, kick_linux.go, uapi.go), the peers
// from the leases (peers.go), what Run puts back (repair.go), the userspace devices'
// drops (drops.go) and what it reports (report.go).
package wireguard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/kernel"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/paths/way"
	"github.com/weftnet/weft/transport/relay"
)

// wireguardType is the BackendType of the wireguard backend's leases.
const wireguardType = "wireguard"

// The wireguard backend's devices, as flanneld names them: flannel-wg carries IPv4
// (or both families in the single-device modes), flannel-wg-v6 IPv6 in Mode
// "separate".
const (
	Device   = "flannel-wg"
	DeviceV6 = "flannel-wg-v6"
)

// wgOverhead is what flanneld takes from the MTU for WireGuard: a 40-byte IPv6 header
// (the longer of the two), 8 bytes of UDP, 4 of type, 4 of key index, 8 of nonce and
// 16 of authentication tag.
const wgOverhead = 80

// DefaultKeyFile is where flanneld keeps the private key (WIREGUARD_KEY_FILE
// replaces it).
const DefaultKeyFile = "/run/flannel/wgkey"

// DefaultSocketDir is where wireguard-go and `wg` put and look for the UAPI
// sockets of userspace devices.
const DefaultSocketDir = "/var/run/wireguard"

// The implementations of a WireGuard device (Tuning.Device, Backend.Device).
const (
	Auto      = "auto"      // the kernel's when it has WireGuard, else userspace
	Kernel    = "kernel"    // the kernel's only
	Userspace = "userspace" // wireguard-go's, in weftd
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

// Tuning is how weftd's environment tunes the wireguard backend.
type Tuning struct {
	// Device, when set, replaces Backend.Device: auto, kernel or userspace.
	Device string
	// SocketDir is where the UAPI sockets of userspace devices go
	// (DefaultSocketDir when empty).
	SocketDir string
	// KeyFile is the private key's file (DefaultKeyFile when empty).
	KeyFile string
	// PathPort is the UDP port of the path socket (relay.DefaultPort when 0;
	// negative: none, and no way to a peer but direct).
	PathPort int
	// NoPathChoice keeps every peer on the direct way (the probes, its evidence, are
	// off).
	NoPathChoice bool
}

// backend is flannel's "wireguard" backend: a WireGuard device per address family
// (Mode "separate") or one for both, whose peers are the other hosts' leases: each
// peer's AllowedIPs are its subnets and its endpoint PublicIP:Port from its lease.
// The device has our subnet's first address as a host address, and the route to the
// whole network, as flanneld's has; WireGuard picks the peer by AllowedIPs.
type backend struct {
	cfg       *lease.Config
	opts      wireguardOptions
	ext       encap.ExternalInterface
	log       *zap.Logger
	device    string // Auto, Kernel or Userspace
	socketDir string
	keyFile   string
	priv      wgtypes.Key
	psk       *wgtypes.Key
	keepalive time.Duration

	mu sync.Mutex
	// devs[0] is flannel-wg, devs[1] flannel-wg-v6 (Mode "separate" with IPv6 only).
	devs [2]wgDevice
	// kept[i] says devs[i] was taken over with the peers an earlier weftd gave it
	// (the kernel's): the first leases' HandleEvents removes those no lease names.
	kept [2]bool
	// drops counts what the userspace devices dropped (drops.go).
	drops wgDropCounts
	own   lease.Lease
	// applied is what each device has per peer lease (by peerKey); owner says which
	// lease a public key is configured for on each device, so that a key that moved
	// to another lease is not removed with the old one.
	applied map[netip.Prefix][2]*wgPeerConf
	owner   [2]map[wgtypes.Key]netip.Prefix
	// repairs counts what Run put back, by object ("device", "route").
	repairs map[string]uint64
	// mtus are the route MTUs SetRouteMTU set, by subnet; remake writes them again.
	mtus kernel.RouteMTUs

	// Sites and ways (sites.go): every peer lease (by peerKey), each one's own
	// configuration (base), and how we reach the peers outside our site (ways).
	leases map[netip.Prefix]lease.Lease
	// atPath indexes leases by their path port (relayAt); nil after a lease
	// changed, made again when next asked.
	atPath map[netip.AddrPort]netip.Prefix
	base   map[netip.Prefix][2]*wgPeerConf
	ways   map[netip.Prefix]*way.State
	// ev is the evidence of one peer's decision, filled anew for each (evidence);
	// pings are the pings a tick's decisions asked for, sent together (sendPings).
	ev    way.Evidence
	pings []relay.PingTo
	// keptWays are the ways an earlier weftd kept (keptways.go), by public key, each
	// resumed once; waysSaved and waysSavedAt are what saveWays last wrote, and when.
	keptWays    map[wgtypes.Key]keptWay
	waysSaved   string
	waysSavedAt time.Time
	// relayedSavedAt: when the relayed hosts were last written (keepRelayed).
	relayedSavedAt time.Time
	// The path socket (nil: none) on pathPort, read from the moment it is open
	// until Close (nodeRun); noChoice keeps every peer direct.
	node     *relay.Node
	nodeRun  sync.WaitGroup
	pathPort int
	noChoice bool
	// A hand-over (Linger): Close hands the path socket on (passing, PassSockets)
	// and leaves the node sending for the device that lingers (handedNode) until
	// closed is closed and the device has stopped. taken are the sockets the weftd
	// before us passed on (TakeSockets), until the devices are made.
	handing    bool
	passing    map[string]*os.File
	handedNode *relay.Node
	closed     chan struct{}
	taken      map[string]*os.File
	// Our NAT's outside address for our WireGuard socket, as the hosts we say hello
	// to see it, and why punching cannot work from here when a NAT maps each
	// destination anew.
	outside            netip.AddrPort
	mapsPerDestination string
	helloAt            time.Time
	helloCands         int
	pathChanges        uint64
	leftUnprobed       uint64 // ways left on the verdict before the probes judged them
	// probePace: how long a new way may wait for its first probe round (ProbePace).
	probePace time.Duration
	// seen: where the IPv4 device sees its peers, as of the last tick (keepSeen),
	// read by the path socket's hello answers without w.mu (seenAt).
	seen atomic.Pointer[map[wgtypes.Key]netip.AddrPort]
}

// New returns the wireguard backend. It reads (or makes, once) the private
// key; the devices are made by BackendData, before the lease is acquired, as
// flanneld makes them.
func New(cfg *lease.Config, ext encap.ExternalInterface, tuning Tuning, log *zap.Logger) (encap.Backend, error) {
	o, psk, pathPort, err := parseOptions(cfg.Backend, ext.MTU, tuning)
	if err != nil {
		return nil, err
	}
	w := &backend{
		cfg: cfg, opts: o, ext: ext, log: log, device: o.Device,
		socketDir: tuning.SocketDir, keyFile: tuning.KeyFile, psk: psk,
		keepalive: time.Duration(o.PersistentKeepaliveInterval) * time.Second,
		applied:   map[netip.Prefix][2]*wgPeerConf{},
		owner:     [2]map[wgtypes.Key]netip.Prefix{{}, {}},
		repairs:   map[string]uint64{},
		leases:    map[netip.Prefix]lease.Lease{}, base: map[netip.Prefix][2]*wgPeerConf{},
		ways: map[netip.Prefix]*way.State{}, pathPort: pathPort, noChoice: tuning.NoPathChoice,
	}
	if w.socketDir == "" {
		w.socketDir = DefaultSocketDir
	}
	if w.keyFile == "" {
		w.keyFile = DefaultKeyFile
	}
	priv, made, err := loadOrMakeKey(w.keyFile)
	if err != nil {
		return nil, fmt.Errorf("wireguard backend: private key: %w", err)
	}
	w.priv = priv
	w.loadKeptWays()
	log.Info("WireGuard private key", zap.String("file", w.keyFile), zap.Bool("made", made),
		zap.Stringer("public-key", priv.PublicKey()))
	return w, nil
}

// Type is "wireguard".
func (w *backend) Type() string { return wireguardType }

// MTU is the Backend's MTU (the external interface's by default) less the WireGuard
// overhead, as flanneld gives it; the devices have the same.
func (w *backend) MTU() int { return w.opts.MTU - wgOverhead }

// single reports whether one device carries both families (every Mode but separate).
func (w *backend) single() bool { return w.opts.Mode != wgSeparate }

// devFor is the index in devs of the device carrying family f.
func (w *backend) devFor(f encap.Family) int {
	if f.Is6() && !w.single() {
		return 1
	}
	return 0
}

// BackendData makes the devices (once) and returns {"PublicKey","Port"} of the IPv4
// side; nil on a network without IPv4.
func (w *backend) BackendData(context.Context) (json.RawMessage, error) {
	if err := w.open(); err != nil {
		return nil, err
	}
	if !encap.V4(w.cfg).On() {
		return nil, nil
	}
	return json.Marshal(wgLeaseData{PublicKey: w.priv.PublicKey().String(), Port: uint16(w.opts.ListenPort)})
}

// BackendV6Data is the IPv6 side's data: ListenPortV6 in every Mode, as flanneld
// publishes it.
func (w *backend) BackendV6Data(context.Context) (json.RawMessage, error) {
	if !encap.V6(w.cfg).On() {
		return nil, nil
	}
	return json.Marshal(wgLeaseData{PublicKey: w.priv.PublicKey().String(), Port: uint16(w.opts.ListenPortV6)})
}

// Register gives each device our subnet's first address (/32, /128) and the route to
// the network, and sets it up.
func (w *backend) Register(ctx context.Context, own lease.Lease) error {
	if err := w.open(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.own = own
	var errs []error
	for _, f := range []encap.Family{encap.V4(w.cfg), encap.V6(w.cfg)} {
		if f.On() {
			errs = append(errs, w.setUp(f))
		}
	}
	return errors.Join(errs...)
}

// setUp gives the device of family f our subnet's first address and the route to the
// network, and sets it up. w.mu is held.
func (w *backend) setUp(f encap.Family) error {
	sn := f.Subnet(w.own)
	if !sn.IsValid() {
		return fmt.Errorf("the lease has no subnet of the network %v", f.Network)
	}
	d := w.devs[w.devFor(f)]
	link, err := d.Link()
	if err != nil {
		return fmt.Errorf("device %s: %w", d.Name(), err)
	}
	if err := setWGAddr(link, f, netip.PrefixFrom(sn.Addr(), f.HostBits())); err != nil {
		return fmt.Errorf("device %s: %w", d.Name(), err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("device %s: set up: %w", d.Name(), err)
	}
	return wgRoute(link, f.Network)
}

// handsOver is a device that can go on after Close, beside the device of a new weftd
// that takes over, until the new one carries its peers' traffic (wireguard-go's in
// weftd); attach lets such a new device read its TUN once its peers are configured.
type handsOver interface {
	handOverOnClose() <-chan struct{}
	attach()
}

// Linger makes Close leave the userspace devices running for the new weftd that
// takes over, until its devices carry their peers' traffic (encap.Lingerer); the
// kernel's stay as always. The channel closes when they have stopped.
//
// The path socket is handed on (PassSockets) rather than closed, and the node goes on
// sending until the devices have stopped: a lingering device's relayed peers are
// reached through it until the new device joins.
func (w *backend) Linger() <-chan struct{} {
	w.mu.Lock()
	var waits []<-chan struct{}
	for _, d := range w.devs {
		if h, ok := d.(handsOver); ok {
			waits = append(waits, h.handOverOnClose())
		}
	}
	w.handing = true
	closed := make(chan struct{})
	w.closed = closed
	w.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, c := range waits {
			<-c
		}
		<-closed
		w.mu.Lock()
		n := w.handedNode
		w.handedNode = nil
		w.mu.Unlock()
		if n != nil {
			_ = n.Close()
		}
	}()
	return done
}

// pathSocket names the path socket among the sockets passed on in a hand-over.
const pathSocket = "wireguard-path"

// PassSockets is the path socket, for the new weftd (encap.SocketPasser), after a
// Close that followed Linger.
func (w *backend) PassSockets() map[string]*os.File {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.passing
	w.passing = nil
	return p
}

// TakeSockets keeps the sockets the weftd before us passed on, for open.
func (w *backend) TakeSockets(files map[string]*os.File) {
	w.mu.Lock()
	defer w.mu.Unlock()
	closeFiles(w.taken)
	w.taken = files
}

func closeFiles(files map[string]*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// Close leaves the devices, with their addresses and routes (the kernel's with its
// peers and sessions), for the next weftd, and removes the userspace devices' UAPI
// sockets and the route MTUs this process chose; flanneld removes its devices when it
// stops. `weftd cleanup` removes them.
func (w *backend) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for i, d := range w.devs {
		if d != nil {
			if link, err := d.Link(); err == nil && w.mtus.Len() > 0 {
				errs = append(errs, w.mtus.ClearOn(link.Attrs().Index))
			}
			errs = append(errs, d.Close())
			w.devs[i] = nil
		}
	}
	if w.node != nil {
		w.stopNode()
		w.saveRelayed(w.node)
		w.node = nil
	}
	w.nodeRun.Wait()
	closeFiles(w.taken)
	w.taken = nil
	if w.closed != nil {
		close(w.closed)
		w.closed = nil
	}
	return errors.Join(errs...)
}

// stopNode stops the path socket's node: in a hand-over it hands the socket on
// (PassSockets) and stops reading, but goes on sending (Linger); otherwise it closes.
// w.mu is held.
func (w *backend) stopNode() {
	if w.handing {
		f, err := w.node.Hand()
		if err == nil {
			w.passing = map[string]*os.File{pathSocket: f}
			w.handedNode = w.node
			return
		}
		w.log.Warn("could not hand the path socket on: closing it, the new weftd opens its own", zap.Error(err))
	}
	if err := w.node.Close(); err != nil {
		w.log.Warn("closing the path socket", zap.Error(err))
	}
}
