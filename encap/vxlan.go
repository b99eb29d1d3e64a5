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

// vxlanOverhead is what VXLAN over IPv4 adds to a frame: outer IPv4, UDP, VXLAN and
// inner Ethernet headers.
const vxlanOverhead = 50

// minVXLANMTU is the least MTU option: it leaves the device IPv4's minimum of 68.
const minVXLANMTU = 68 + vxlanOverhead

// vxlanData is the BackendData of a vxlan lease, as flanneld writes it: {"VNI":1,"VtepMAC":"…"}.
type vxlanData struct {
	VNI     int    `json:"VNI"`
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
	case o.MTU < 0 || o.MTU > 0 && o.MTU < minVXLANMTU:
		return nil, fmt.Errorf("%w: vxlan MTU %d is below %d (the underlay's MTU; %s gets %d less)",
			ErrBadOption, o.MTU, minVXLANMTU, "flannel."+strconv.Itoa(o.VNI), vxlanOverhead)
	}
	if o.MTU == 0 {
		o.MTU = ext.MTU
	}
	if o.MacPrefix != "" {
		log.Info("vxlan MacPrefix is an option of flanneld's Windows backend; ignored, as flanneld on Linux does",
			zap.String("MacPrefix", o.MacPrefix))
	}
	k, err := newKernelPeers("vxlan", cfg, ext, log)
	if err != nil {
		return nil, err
	}
	k.device = "flannel." + strconv.Itoa(o.VNI)
	return &vxlan{kernelPeers: k, opts: o, name: k.device}, nil
}

func (v *vxlan) Type() string { return "vxlan" }
func (v *vxlan) MTU() int     { return v.devMTU() }
func (v *vxlan) Close() error { v.nl.Close(); return nil }

// devMTU is flannel.<VNI>'s MTU: the underlay's less the VXLAN overhead.
func (v *vxlan) devMTU() int { return v.opts.MTU - vxlanOverhead }

// BackendData makes (or adopts) the device and publishes its MAC.
func (v *vxlan) BackendData(context.Context) (json.RawMessage, error) {
	if err := v.ensureDevice(); err != nil {
		return nil, err
	}
	v.devMu.Lock()
	defer v.devMu.Unlock()
	return json.Marshal(vxlanData{VNI: v.opts.VNI, VtepMAC: v.mac.String()})
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

func (v *vxlan) Run(ctx context.Context) error { return v.run(ctx, v.reconcile, v.apply) }

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
			LinkAttrs:    netlink.LinkAttrs{Name: v.name, MTU: v.devMTU(), HardwareAddr: v.mac},
			VxlanId:      v.opts.VNI,
			VtepDevIndex: v.ext.Index,
			SrcAddr:      net.IP(v.ext.IfaceIP.AsSlice()),
			Port:         v.opts.Port,
			Learning:     v.opts.Learning,
			GBP:          v.opts.GBP,
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
	if link.Attrs().MTU != v.devMTU() {
		if err := v.nl.LinkSetMTU(link, v.devMTU()); err != nil {
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
	case x.GBP != v.opts.GBP:
		return fmt.Errorf("%w: gbp %v, want %v", errIncompatible, x.GBP, v.opts.GBP)
	case x.Learning != v.opts.Learning:
		return fmt.Errorf("%w: learning %v, want %v", errIncompatible, x.Learning, v.opts.Learning)
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
		v.deviceRepaired()
	}
	if err := v.ensureDevice(); err != nil {
		return err
	}
	idx := v.devIndex()
	peers, synced, own := v.snapshot()
	routes := map[netip.Prefix]netlink.Route{}
	neighs := map[netip.Addr]net.HardwareAddr{}
	fdb := map[string]netip.Addr{}
	applied := make(map[netip.Prefix]programmed, len(peers))
	for _, p := range peers {
		r, pr, mac, ok := v.want(p, idx)
		if !ok {
			continue
		}
		routes[p.Subnet], applied[p.Subnet] = r, pr
		if mac != nil {
			neighs[pr.gw] = mac
			fdb[pr.mac] = pr.pub
		}
	}
	// Recorded first, so that watchKernel takes the stale entries this pass removes
	// for what they are.
	v.resetApplied(applied)
	var errs []error
	errs = append(errs, v.syncNeighbours(idx, neighs, synced), v.syncFDB(idx, fdb, synced))
	errs = append(errs, v.syncRoutes(routes, []int{idx, v.ext.Index}, own, synced))
	return errors.Join(errs...)
}

func (v *vxlan) devIndex() int {
	v.devMu.Lock()
	defer v.devMu.Unlock()
	return v.index
}

// want returns peer p's route and what else it needs in the kernel: with a VtepMAC
// (mac non-nil) a neighbour entry for its gateway and an fdb entry, without one
// (DirectRouting to a directly connected peer) the route alone. ok is false for a peer
// that gets nothing (bad BackendData, logged once).
func (v *vxlan) want(p lease.Lease, idx int) (netlink.Route, programmed, net.HardwareAddr, bool) {
	if v.opts.DirectRouting {
		direct, why := v.directlyConnected(p.Attrs.PublicIP)
		if direct {
			v.once(p.Subnet, false, "DirectRouting: direct route to peer", zap.Stringer("peer", p.Attrs.PublicIP),
				zap.Stringer("peer-subnet", p.Subnet), zap.String("why", why))
			r := netlink.Route{Dst: ipconv.IPNet(p.Subnet), Gw: net.IP(p.Attrs.PublicIP.AsSlice()), LinkIndex: v.ext.Index}
			return r, programmed{link: v.ext.Index}, nil, true
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
		return netlink.Route{}, programmed{}, nil, false
	}
	gw := p.Subnet.Masked().Addr()
	r := netlink.Route{Dst: ipconv.IPNet(p.Subnet), Gw: net.IP(gw.AsSlice()), LinkIndex: idx, Flags: int(netlink.FLAG_ONLINK)}
	return r, programmed{link: idx, mac: mac.String(), gw: gw, pub: p.Attrs.PublicIP}, mac, true
}

// apply writes the changed peers' entries alone: first what the present peers need
// (route, neighbour, fdb: replaced in place), then what the gone ones (or a peer's
// old VtepMAC) leave behind. No listing: its cost does not grow with the peers.
func (v *vxlan) apply(changed []netip.Prefix) error {
	idx := v.devIndex()
	var errs []error
	var gone []change
	for _, c := range v.changes(changed) {
		var r netlink.Route
		var pr programmed
		var mac net.HardwareAddr
		if c.ok {
			r, pr, mac, c.ok = v.want(c.lease, idx)
		}
		if !c.ok {
			if c.had {
				gone = append(gone, c)
			}
			continue
		}
		if mac != nil {
			n := netlink.Neigh{LinkIndex: idx, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
				IP: net.IP(pr.gw.AsSlice()), HardwareAddr: mac}
			if err := v.nl.NeighSet(&n); err != nil {
				errs = append(errs, fmt.Errorf("neighbour %v: %w", pr.gw, err))
			} else {
				v.placed("neigh", pr.gw.String(), true)
			}
			f := netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT,
				Flags: netlink.NTF_SELF, IP: net.IP(pr.pub.AsSlice()), HardwareAddr: mac}
			if err := v.nl.NeighSet(&f); err != nil {
				errs = append(errs, fmt.Errorf("fdb %s: %w", pr.mac, err))
			} else {
				v.placed("fdb", pr.mac, true)
			}
		}
		// The route takes the old one's place whatever its link (same destination).
		if err := v.replaceRoute(r); err != nil {
			errs = append(errs, err)
		}
		macFree := v.setApplied(c.subnet, pr, true)
		if c.had && c.old.mac != "" {
			errs = append(errs, v.removeNeighbours(idx, c.old, mac == nil, macFree))
		}
	}
	for _, c := range gone {
		macFree := v.setApplied(c.subnet, programmed{}, false)
		errs = append(errs, v.deleteRoute(c.subnet, c.old.link))
		if c.old.mac != "" {
			errs = append(errs, v.removeNeighbours(idx, c.old, true, macFree))
		}
	}
	return errors.Join(errs...)
}

// removeNeighbours removes what old put in the kernel beside its route: the neighbour
// entry (neigh) and the fdb entry (fdb, when no other peer uses its MAC). Entries
// already gone are fine.
func (v *vxlan) removeNeighbours(idx int, old programmed, neigh, fdb bool) error {
	var errs []error
	gone := func(err error) bool { return err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) }
	if neigh {
		v.placed("neigh", old.gw.String(), false)
		n := netlink.Neigh{LinkIndex: idx, Family: netlink.FAMILY_V4, IP: net.IP(old.gw.AsSlice())}
		if err := v.nl.NeighDel(&n); !gone(err) {
			errs = append(errs, fmt.Errorf("remove neighbour %v: %w", old.gw, err))
		}
	}
	if fdb {
		v.placed("fdb", old.mac, false)
		hw, _ := net.ParseMAC(old.mac)
		f := netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
			IP: net.IP(old.pub.AsSlice()), HardwareAddr: hw}
		if err := v.nl.NeighDel(&f); !gone(err) {
			errs = append(errs, fmt.Errorf("remove fdb %s: %w", old.mac, err))
		}
	}
	return errors.Join(errs...)
}

func (v *vxlan) syncNeighbours(idx int, want map[netip.Addr]net.HardwareAddr, prune bool) error {
	v.count("netlink_lists")
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
	inPlace, written := map[string]bool{}, map[string]bool{}
	for ip, mac := range want {
		if n, ok := got[ip]; ok && n.HardwareAddr.String() == mac.String() && n.State&netlink.NUD_PERMANENT != 0 {
			inPlace[ip.String()] = true
			continue
		}
		n := netlink.Neigh{LinkIndex: idx, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT, IP: net.IP(ip.AsSlice()), HardwareAddr: mac}
		if err := v.nl.NeighSet(&n); err != nil {
			errs = append(errs, fmt.Errorf("neighbour %v: %w", ip, err))
			continue
		}
		inPlace[ip.String()], written[ip.String()] = true, true
	}
	v.settle("neigh", inPlace, written)
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
	v.count("netlink_lists")
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
	inPlace, written := map[string]bool{}, map[string]bool{}
	for mac, dst := range want {
		if n, ok := got[mac]; ok && n.IP.Equal(net.IP(dst.AsSlice())) {
			inPlace[mac] = true
			continue
		}
		hw, _ := net.ParseMAC(mac)
		n := netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT,
			Flags: netlink.NTF_SELF, IP: net.IP(dst.AsSlice()), HardwareAddr: hw}
		if err := v.nl.NeighSet(&n); err != nil {
			errs = append(errs, fmt.Errorf("fdb %s: %w", mac, err))
			continue
		}
		inPlace[mac], written[mac] = true, true
	}
	v.settle("fdb", inPlace, written)
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
