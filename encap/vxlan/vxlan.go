// Package vxlan holds the vxlan backend: flannel.<VNI> and flannel-v6.<VNI>, and
// its options and lease data (vxlan.go), per peer an onlink route, a permanent
// neighbour entry and an fdb entry (entries.go),
// the devices themselves (device.go). Its reconcile loop is encap/kernel's.
package vxlan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"sync"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/kernel"
	"github.com/weftnet/weft/lease"
)

// vxlanOptions are the vxlan backend's options in the network config's Backend object.
// As in flanneld, MTU is the underlay's MTU (default: the external interface's); the
// device gets MTU-50, the VXLAN overhead. GBP and Learning set the device's flags of
// those names. MacPrefix is accepted and ignored, as flanneld on Linux does (it is
// its Windows backend's option).
type vxlanOptions struct {
	VNI           int
	Port          int
	MTU           int
	GBP           bool
	Learning      bool
	DirectRouting bool
	MacPrefix     string
}

// ErrNoIPv6Address is returned for a network with EnableIPv6 when the external
// interface has no IPv6 address (flanneld refuses to start then too).
var ErrNoIPv6Address = errors.New("no IPv6 address")

// vxlanOverhead is what VXLAN over IPv4 adds to a frame: outer IPv4, UDP, VXLAN and
// inner Ethernet headers.
const vxlanOverhead = 50

// vxlan6Overhead is the same over IPv6 (its header is 20 bytes longer).
const vxlan6Overhead = 70

// minVXLANMTU is the least MTU option: it leaves the device IPv4's minimum of 68.
const minVXLANMTU = 68 + vxlanOverhead

// vxlanData is the BackendData of a vxlan lease, as flanneld writes it: {"VNI":1,"VtepMAC":"…"}.
type vxlanData struct {
	VNI     int    `json:"VNI"`
	VtepMAC string `json:"VtepMAC"`
}

// backend programs the kernel's VXLAN devices: flannel.<VNI> for IPv4 and, on a network
// with EnableIPv6, flannel-v6.<VNI> for IPv6 (an IPv6-only network has only the
// latter), as flanneld does. Per peer and family: an onlink route, a permanent
// neighbour entry and an fdb entry (or, with DirectRouting, a plain route to peers on
// a directly connected subnet).
type backend struct {
	k    *kernel.Peers
	nl   *netlink.Handle // k's
	log  *zap.Logger
	opts vxlanOptions

	devMu sync.Mutex
	dev4  *vtepDev // nil on an IPv6-only network
	dev6  *vtepDev // nil without EnableIPv6
}

// New returns the vxlan backend.
func New(cfg *lease.Config, ext encap.ExternalInterface, log *zap.Logger) (encap.Backend, error) {
	o, err := parseOptions(cfg.Backend, ext.MTU)
	if err != nil {
		return nil, err
	}
	if o.MacPrefix != "" {
		log.Info("vxlan MacPrefix is an option of flanneld's Windows backend; ignored, as flanneld on Linux does",
			zap.String("MacPrefix", o.MacPrefix))
	}
	v := &backend{log: log, opts: o}
	if f := encap.V6(cfg); f.On() {
		if !ext.IfaceIPv6.IsValid() {
			return nil, fmt.Errorf("%w: vxlan with EnableIPv6 needs an IPv6 address on %s for flannel-v6.%d", ErrNoIPv6Address, ext.Name, o.VNI)
		}
		v.dev6 = &vtepDev{fam: f, name: devPrefixV6 + strconv.Itoa(o.VNI), local: ext.IfaceIPv6}
	}
	if f := encap.V4(cfg); f.On() || v.dev6 == nil {
		v.dev4 = &vtepDev{fam: f, name: devPrefix + strconv.Itoa(o.VNI), local: ext.IfaceIP}
	}
	var devices []string
	for _, d := range []*vtepDev{v.dev4, v.dev6} {
		if d != nil {
			devices = append(devices, d.name)
		}
	}
	k, err := kernel.New("vxlan", cfg, ext, kernel.Passes{Full: v.reconcile, Apply: v.apply}, log, devices...)
	if err != nil {
		return nil, err
	}
	v.k, v.nl = k, k.NL()
	return v, nil
}

func (v *backend) Type() string { return "vxlan" }

// MTU is flannel.<VNI>'s MTU, as flanneld's FLANNEL_MTU; on an IPv6-only network
// flannel-v6.<VNI>'s, which is 20 less when the underlay's MTU bounds it.
func (v *backend) MTU() int {
	if v.dev4 == nil {
		return v.devMTU(v.dev6)
	}
	return v.devMTU(v.dev4)
}

func (v *backend) Close() error { return v.k.Close() }

// Paths lists a path per peer and family: through flannel.<VNI> (or flannel-v6.<VNI>)
// from our subnet's first address, which the device holds, to the peer's, which its
// device holds (flanneld's as weftd's).
func (v *backend) Paths() []encap.Path {
	proto := "UDP " + strconv.Itoa(v.opts.Port)
	mtu := [2]int{}
	for _, d := range []*vtepDev{v.dev4, v.dev6} {
		if d != nil {
			mtu[d.fam.Index()] = v.devMTU(d)
		}
	}
	return v.k.Paths(func(f encap.Family, l lease.Lease, own netip.Prefix) (encap.Path, bool) {
		sn, pub := f.Subnet(l), f.PublicIP(l)
		if !f.Fits(sn) || !pub.IsValid() || !own.IsValid() || mtu[f.Index()] == 0 {
			return encap.Path{}, false
		}
		return encap.Path{Backend: "vxlan", Subnet: sn, PublicIP: pub, Overlay: sn.Masked().Addr(),
			Local: own.Masked().Addr(), Endpoint: netip.AddrPortFrom(pub, uint16(v.opts.Port)),
			Proto: proto, MTU: mtu[f.Index()]}, true
	})
}

// SetRouteMTU sets the MTU of the route to a peer's subnet (kernel.Peers.SetRouteMTU).
func (v *backend) SetRouteMTU(sn netip.Prefix, mtu int) error { return v.k.SetRouteMTU(sn, mtu) }

// devMTU is d's MTU: the underlay's less the VXLAN overhead over IPv4. flanneld asks
// the same for flannel-v6.<VNI>, and the kernel lowers it to what the external
// interface's MTU leaves after VXLAN over IPv6 (20 more); so does weft.
func (v *backend) devMTU(d *vtepDev) int {
	mtu := v.opts.MTU - vxlanOverhead
	if ext := v.k.External(); d != nil && d.fam.Is6() && ext.MTU > 0 {
		mtu = min(mtu, ext.MTU-vxlan6Overhead)
	}
	return mtu
}

// BackendData makes (or adopts) flannel.<VNI> and publishes its MAC; nothing on an
// IPv6-only network.
func (v *backend) BackendData(context.Context) (json.RawMessage, error) {
	return v.publish(v.dev4)
}

// BackendV6Data makes (or adopts) flannel-v6.<VNI> and publishes its MAC in the same
// shape ({"VNI":1,"VtepMAC":"…"}) for the lease's BackendV6Data; nothing without
// EnableIPv6.
func (v *backend) BackendV6Data(context.Context) (json.RawMessage, error) {
	return v.publish(v.dev6)
}

func (v *backend) publish(d *vtepDev) (json.RawMessage, error) {
	if d == nil {
		return nil, nil
	}
	if err := v.ensureDevice(d); err != nil {
		return nil, err
	}
	v.devMu.Lock()
	defer v.devMu.Unlock()
	return json.Marshal(vxlanData{VNI: v.opts.VNI, VtepMAC: d.mac.String()})
}

func (v *backend) Register(_ context.Context, own lease.Lease) error {
	for _, d := range []*vtepDev{v.dev4, v.dev6} {
		if d == nil {
			continue
		}
		sn := d.fam.Subnet(own)
		if !sn.IsValid() {
			return fmt.Errorf("vxlan: configure %s: our lease has no subnet of its family", d.name)
		}
		v.devMu.Lock()
		d.addr = sn.Masked().Addr()
		v.devMu.Unlock()
		if err := v.ensureDevice(d); err != nil {
			return err
		}
	}
	v.k.SetOwn(own)
	return nil
}

// SetExternal moves the devices onto ext: the next pass makes flannel.<VNI> (and
// flannel-v6.<VNI>) again on ext's index and from its addresses, keeping their MACs
// (the kernel deletes a VXLAN device with its parent; one whose parent or local
// address differs is deleted and made again), then puts back every route, neighbour
// and fdb entry.
func (v *backend) SetExternal(ext encap.ExternalInterface) {
	v.devMu.Lock()
	if v.dev4 != nil {
		v.dev4.local = ext.IfaceIP
	}
	if v.dev6 != nil {
		v.dev6.local = ext.IfaceIPv6
	}
	v.devMu.Unlock()
	v.k.SetExternal(ext)
}

func (v *backend) HandleEvents(_ context.Context, events []lease.Event) { v.k.Handle(events) }

// Run makes the kernel match the peers until ctx ends (kernel.Peers.Run).
func (v *backend) Run(ctx context.Context) error { return v.k.Run(ctx) }

// Kernel is the backend's share of encap/kernel: the peers and the loop that
// programs them (encap/kernel's tests drive it through here).
func (v *backend) Kernel() *kernel.Peers { return v.k }

// Report returns the peers the backend programs, its repairs and its counters.
func (v *backend) Report() encap.Report { return v.k.Report() }

// RepairKinds are the kernel objects the loop puts back: the devices, and per peer
// the route, neighbour and fdb entries.
func (v *backend) RepairKinds() []string { return []string{"device", "route", "neigh", "fdb"} }

// The vxlan backend's devices are named, as flanneld names them, a prefix and the
// VNI: flannel.<VNI> for IPv4, flannel-v6.<VNI> for IPv6.
const (
	devPrefix   = "flannel."
	devPrefixV6 = "flannel-v6."
)

// Devices are the devices the vxlan backend makes (`weftd cleanup` removes them).
var Devices = []encap.Device{
	{Name: devPrefix + "<VNI>", Types: []string{"vxlan"}},
	{Name: devPrefixV6 + "<VNI>", Types: []string{"vxlan"}},
}

var (
	_ encap.PathLister       = (*backend)(nil)
	_ encap.RouteMTUSetter   = (*backend)(nil)
	_ encap.RepairKindLister = (*backend)(nil)
)
