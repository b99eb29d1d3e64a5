package encap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/proxy"
)

// vxlanOptions are the vxlan backend's options in the network config's Backend object.
type vxlanOptions struct {
	VNI           int
	Port          int
	MTU           int
	DirectRouting bool
}

// vxlanData is the BackendData of a vxlan lease, as flanneld writes it.
type vxlanData struct {
	VtepMAC string `json:"VtepMAC"`
}

// vxlan programs the kernel's VXLAN device flannel.<VNI>: per peer an onlink route,
// a permanent neighbour entry and an fdb entry (or, with DirectRouting, a plain route
// to peers on a directly connected subnet).
type vxlan struct {
	*kernelPeers
	opts vxlanOptions
	name string

	devMu sync.Mutex
	mac   net.HardwareAddr
	index int
	addr  netip.Addr
}

// NewVXLAN returns the vxlan backend.
func NewVXLAN(cfg *lease.Config, ext ExternalInterface, log *zap.Logger) (Backend, error) {
	o := vxlanOptions{VNI: 1, Port: 8472}
	if err := decodeOptions("vxlan", cfg.Backend, &o); err != nil {
		return nil, err
	}
	if err := proxy.CheckPort(o.Port); err != nil {
		return nil, fmt.Errorf("%w: vxlan backend: %w", ErrBadOption, err)
	}
	switch {
	case o.VNI < 0 || o.VNI > 1<<24-1:
		return nil, fmt.Errorf("%w: vxlan VNI %d is not in 0..16777215", ErrBadOption, o.VNI)
	case o.MTU < 0 || o.MTU > 0 && o.MTU < 576:
		return nil, fmt.Errorf("%w: vxlan MTU %d is below 576", ErrBadOption, o.MTU)
	}
	if o.MTU == 0 {
		o.MTU = ext.MTU - 50
	}
	k, err := newKernelPeers("vxlan", cfg, ext, log)
	if err != nil {
		return nil, err
	}
	return &vxlan{kernelPeers: k, opts: o, name: "flannel." + strconv.Itoa(o.VNI)}, nil
}

func (v *vxlan) Type() string { return "vxlan" }
func (v *vxlan) MTU() int     { return v.opts.MTU }
func (v *vxlan) Close() error { v.nl.Close(); return nil }

// BackendData makes (or adopts) the device and publishes its MAC.
func (v *vxlan) BackendData(context.Context) (json.RawMessage, error) {
	if err := v.ensureDevice(); err != nil {
		return nil, err
	}
	v.devMu.Lock()
	defer v.devMu.Unlock()
	return json.Marshal(vxlanData{VtepMAC: v.mac.String()})
}

func (v *vxlan) Register(_ context.Context, own lease.Lease) error {
	v.devMu.Lock()
	v.addr = own.Subnet.Masked().Addr()
	v.devMu.Unlock()
	if err := v.ensureDevice(); err != nil {
		return err
	}
	v.setOwn(own.Subnet)
	return nil
}

func (v *vxlan) HandleEvents(_ context.Context, events []lease.Event) { v.handle(events) }

func (v *vxlan) Run(ctx context.Context) error { return v.run(ctx, v.reconcile) }

// errIncompatible marks an existing device whose settings differ from ours.
var errIncompatible = errors.New("incompatible device")

// ensureDevice adopts a compatible flannel.<VNI>, or (re)creates it keeping its MAC,
// then sets MTU, address and state.
func (v *vxlan) ensureDevice() error {
	v.devMu.Lock()
	defer v.devMu.Unlock()
	link, err := v.nl.LinkByName(v.name)
	if err == nil {
		if cerr := v.compatible(link); cerr != nil {
			v.log.Warn("recreating the vxlan device", zap.String("dev", v.name), zap.Error(cerr))
			if v.mac == nil {
				v.mac = link.Attrs().HardwareAddr
			}
			if err := v.nl.LinkDel(link); err != nil {
				return fmt.Errorf("delete %s: %w", v.name, err)
			}
			link = nil
		}
	} else {
		link = nil
	}
	if link == nil {
		dev := &netlink.Vxlan{
			LinkAttrs:    netlink.LinkAttrs{Name: v.name, MTU: v.opts.MTU, HardwareAddr: v.mac},
			VxlanId:      v.opts.VNI,
			VtepDevIndex: v.ext.Index,
			SrcAddr:      net.IP(v.ext.IfaceIP.AsSlice()),
			Port:         v.opts.Port,
			Learning:     false,
		}
		if err := v.nl.LinkAdd(dev); err != nil {
			return fmt.Errorf("create %s: %w", v.name, err)
		}
		if link, err = v.nl.LinkByName(v.name); err != nil {
			return fmt.Errorf("find %s after creating it: %w", v.name, err)
		}
		v.log.Info("created the vxlan device", zap.String("dev", v.name), zap.Stringer("mac", link.Attrs().HardwareAddr))
	}
	v.mac, v.index = link.Attrs().HardwareAddr, link.Attrs().Index
	if link.Attrs().MTU != v.opts.MTU {
		if err := v.nl.LinkSetMTU(link, v.opts.MTU); err != nil {
			return fmt.Errorf("set MTU of %s: %w", v.name, err)
		}
	}
	if v.addr.IsValid() {
		if err := v.setAddr(link); err != nil {
			return err
		}
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := v.nl.LinkSetUp(link); err != nil {
			return fmt.Errorf("set %s up: %w", v.name, err)
		}
	}
	return nil
}

func (v *vxlan) compatible(link netlink.Link) error {
	x, ok := link.(*netlink.Vxlan)
	switch {
	case !ok:
		return fmt.Errorf("%w: %s is a %s, not vxlan", errIncompatible, v.name, link.Type())
	case x.VxlanId != v.opts.VNI:
		return fmt.Errorf("%w: VNI %d, want %d", errIncompatible, x.VxlanId, v.opts.VNI)
	case x.Port != v.opts.Port:
		return fmt.Errorf("%w: port %d, want %d", errIncompatible, x.Port, v.opts.Port)
	case x.VtepDevIndex != v.ext.Index:
		return fmt.Errorf("%w: parent index %d, want %d", errIncompatible, x.VtepDevIndex, v.ext.Index)
	case !x.SrcAddr.Equal(net.IP(v.ext.IfaceIP.AsSlice())):
		return fmt.Errorf("%w: local %v, want %v", errIncompatible, x.SrcAddr, v.ext.IfaceIP)
	}
	return nil
}

// setAddr leaves exactly our subnet's network address (/32) on the device.
func (v *vxlan) setAddr(link netlink.Link) error {
	addrs, err := v.nl.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", v.name, err)
	}
	want := net.IP(v.addr.AsSlice())
	found := false
	for _, a := range addrs {
		if a.IP.Equal(want) {
			found = true
			continue
		}
		if err := v.nl.AddrDel(link, &a); err != nil {
			return fmt.Errorf("remove old address %v from %s: %w", a.IPNet, v.name, err)
		}
	}
	if found {
		return nil
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: want, Mask: net.CIDRMask(32, 32)}}
	if err := v.nl.AddrAdd(link, a); err != nil {
		return fmt.Errorf("add %v to %s: %w", v.addr, v.name, err)
	}
	return nil
}

// reconcile makes routes, neighbours and fdb entries match the peers, recreating the
// device first if someone deleted it.
func (v *vxlan) reconcile() error {
	if _, err := v.nl.LinkByName(v.name); err != nil {
		v.log.Warn("the vxlan device is gone; recreating it", zap.String("dev", v.name))
	}
	if err := v.ensureDevice(); err != nil {
		return err
	}
	v.devMu.Lock()
	idx := v.index
	v.devMu.Unlock()
	peers, synced, own := v.snapshot()
	routes := map[netip.Prefix]netlink.Route{}
	neighs := map[netip.Addr]net.HardwareAddr{}
	fdb := map[string]netip.Addr{}
	for _, p := range peers {
		if v.opts.DirectRouting {
			direct, why := v.directlyConnected(p.Attrs.PublicIP)
			if direct {
				v.once(p.Subnet, false, "DirectRouting: direct route to peer", zap.Stringer("peer", p.Attrs.PublicIP),
					zap.Stringer("peer-subnet", p.Subnet), zap.String("why", why))
				routes[p.Subnet] = netlink.Route{Dst: ipconv.IPNet(p.Subnet), Gw: net.IP(p.Attrs.PublicIP.AsSlice()), LinkIndex: v.ext.Index}
				continue
			}
			v.once(p.Subnet, false, "DirectRouting: vxlan to peer", zap.Stringer("peer", p.Attrs.PublicIP),
				zap.Stringer("peer-subnet", p.Subnet), zap.String("why", why))
		}
		var d vxlanData
		mac, err := net.HardwareAddr(nil), json.Unmarshal(orNull(p.Attrs.BackendData), &d)
		if err == nil {
			mac, err = net.ParseMAC(d.VtepMAC)
		}
		if err != nil {
			if v.once(p.Subnet, true, "skipping a vxlan peer with bad BackendData", zap.Stringer("peer", p.Attrs.PublicIP),
				zap.Stringer("peer-subnet", p.Subnet), zap.Error(err)) {
				v.count("bad_peers")
			}
			continue
		}
		gw := p.Subnet.Masked().Addr()
		routes[p.Subnet] = netlink.Route{Dst: ipconv.IPNet(p.Subnet), Gw: net.IP(gw.AsSlice()), LinkIndex: idx, Flags: int(netlink.FLAG_ONLINK)}
		neighs[gw] = mac
		fdb[mac.String()] = p.Attrs.PublicIP
	}
	var errs []error
	errs = append(errs, v.syncNeighbours(idx, neighs, synced), v.syncFDB(idx, fdb, synced))
	errs = append(errs, v.syncRoutes(routes, []int{idx, v.ext.Index}, own, synced))
	return errors.Join(errs...)
}

func (v *vxlan) syncNeighbours(idx int, want map[netip.Addr]net.HardwareAddr, prune bool) error {
	have, err := v.nl.NeighList(idx, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list neighbours of %s: %w", v.name, err)
	}
	got := map[netip.Addr]netlink.Neigh{}
	for _, n := range have {
		if ip, ok := netip.AddrFromSlice(n.IP.To4()); ok {
			got[ip] = n
		}
	}
	var errs []error
	for ip, mac := range want {
		if n, ok := got[ip]; ok && n.HardwareAddr.String() == mac.String() && n.State&netlink.NUD_PERMANENT != 0 {
			continue
		}
		n := netlink.Neigh{LinkIndex: idx, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT, IP: net.IP(ip.AsSlice()), HardwareAddr: mac}
		if err := v.nl.NeighSet(&n); err != nil {
			errs = append(errs, fmt.Errorf("neighbour %v: %w", ip, err))
		}
	}
	if prune {
		for ip, n := range got {
			if _, ok := want[ip]; !ok && v.cfg.Network.Contains(ip) && n.State&netlink.NUD_PERMANENT != 0 {
				if err := v.nl.NeighDel(&n); err != nil {
					errs = append(errs, fmt.Errorf("remove stale neighbour %v: %w", ip, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

func (v *vxlan) syncFDB(idx int, want map[string]netip.Addr, prune bool) error {
	have, err := v.nl.NeighList(idx, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("list fdb of %s: %w", v.name, err)
	}
	got := map[string]netlink.Neigh{}
	for _, n := range have {
		if n.IP != nil {
			got[n.HardwareAddr.String()] = n
		}
	}
	var errs []error
	for mac, dst := range want {
		if n, ok := got[mac]; ok && n.IP.Equal(net.IP(dst.AsSlice())) {
			continue
		}
		hw, _ := net.ParseMAC(mac)
		n := netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT,
			Flags: netlink.NTF_SELF, IP: net.IP(dst.AsSlice()), HardwareAddr: hw}
		if err := v.nl.NeighSet(&n); err != nil {
			errs = append(errs, fmt.Errorf("fdb %s: %w", mac, err))
		}
	}
	if prune {
		for mac, n := range got {
			if _, ok := want[mac]; !ok {
				if err := v.nl.NeighDel(&n); err != nil {
					errs = append(errs, fmt.Errorf("remove stale fdb %s: %w", mac, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}
