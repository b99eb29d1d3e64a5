package vxlan

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/kernel"
	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/lease"
)

// reconcile makes each device's routes, neighbours and fdb entries match the peers.
func (v *backend) reconcile() error {
	var errs []error
	for _, d := range []*vtepDev{v.dev4, v.dev6} {
		if d != nil {
			errs = append(errs, v.reconcileDev(d))
		}
	}
	return errors.Join(errs...)
}

// reconcileDev makes routes, neighbours and fdb entries of d's family match the
// peers, recreating d first if someone deleted it.
func (v *backend) reconcileDev(d *vtepDev) error {
	if _, err := v.nl.LinkByName(d.name); err != nil {
		v.log.Warn("the vxlan device is gone; recreating it", zap.String("dev", d.name))
		v.k.DeviceRepaired()
	}
	if err := v.ensureDevice(d); err != nil {
		return err
	}
	f := d.fam
	idx := v.devIndex(d)
	peers, synced, _ := v.k.Snapshot()
	own := v.k.OwnSubnet(f)
	routes := map[netip.Prefix]netlink.Route{}
	neighs := map[netip.Addr]net.HardwareAddr{}
	fdb := map[string]netip.Addr{}
	applied := make(map[netip.Prefix]kernel.Entries, len(peers))
	for _, p := range peers {
		r, e, mac, ok := v.want(d, p, idx)
		if !ok {
			continue
		}
		routes[e.Dst], applied[encap.PeerKey(p)] = r, e
		if mac != nil {
			neighs[e.GW] = mac
			fdb[e.MAC] = e.Pub
		}
	}
	// Recorded first, so that watchKernel takes the stale entries this pass removes
	// for what they are.
	v.k.ResetApplied(f, applied)
	var errs []error
	errs = append(errs, v.syncNeighbours(f, idx, neighs, synced), v.syncFDB(f, idx, fdb, synced))
	errs = append(errs, v.k.SyncRoutes(f, routes, []int{idx, v.k.External().Index}, own, synced))
	return errors.Join(errs...)
}

func (v *backend) devIndex(d *vtepDev) int {
	v.devMu.Lock()
	defer v.devMu.Unlock()
	return d.index
}

// want returns peer p's route of d's family and what else it needs in the kernel:
// with a VtepMAC (mac non-nil) a neighbour entry for its gateway and an fdb entry,
// without one (DirectRouting to a directly connected peer) the route alone. ok is
// false for a peer that gets nothing in the family: no subnet of it, or no public
// address or bad backend data of it (both logged once).
func (v *backend) want(d *vtepDev, p lease.Lease, idx int) (netlink.Route, kernel.Entries, net.HardwareAddr, bool) {
	f := d.fam
	sn, pub := f.Subnet(p), f.PublicIP(p)
	if !f.Fits(sn) {
		return netlink.Route{}, kernel.Entries{}, nil, false
	}
	if !pub.IsValid() {
		if v.k.Once(sn, true, "skipping a vxlan peer without a public address of its subnet's family",
			zap.Stringer("peer-subnet", sn), zap.String("dev", d.name)) {
			v.k.Count("bad_peers")
		}
		return netlink.Route{}, kernel.Entries{}, nil, false
	}
	if v.opts.DirectRouting {
		direct, why := v.k.DirectlyConnected(pub)
		if direct {
			v.k.Once(sn, false, "DirectRouting: direct route to peer", zap.Stringer("peer", pub),
				zap.Stringer("peer-subnet", sn), zap.String("why", why))
			ext := v.k.External().Index
			r := netlink.Route{Dst: ipconv.IPNet(sn), Gw: net.IP(pub.AsSlice()), LinkIndex: ext, MTU: v.k.RouteMTU(sn)}
			return r, kernel.Entries{Dst: sn, Link: ext}, nil, true
		}
		v.k.Once(sn, false, "DirectRouting: vxlan to peer", zap.Stringer("peer", pub),
			zap.Stringer("peer-subnet", sn), zap.String("why", why))
	}
	var vd vxlanData
	mac, err := net.HardwareAddr(nil), json.Unmarshal(orNull(f.BackendData(p)), &vd)
	if err == nil {
		mac, err = net.ParseMAC(vd.VtepMAC)
	}
	if err != nil {
		if v.k.Once(sn, true, "skipping a vxlan peer with bad BackendData", zap.Stringer("peer", pub),
			zap.Stringer("peer-subnet", sn), zap.String("dev", d.name), zap.Error(err)) {
			v.k.Count("bad_peers")
		}
		return netlink.Route{}, kernel.Entries{}, nil, false
	}
	gw := sn.Masked().Addr()
	r := netlink.Route{Dst: ipconv.IPNet(sn), Gw: net.IP(gw.AsSlice()), LinkIndex: idx, Flags: int(netlink.FLAG_ONLINK),
		MTU: v.k.RouteMTU(sn)}
	return r, kernel.Entries{Dst: sn, Link: idx, MAC: mac.String(), GW: gw, Pub: pub}, mac, true
}

// apply writes the changed peers' entries alone, device by device (flannel.<VNI>,
// flannel-v6.<VNI>). No listing: its cost does not grow with the peers.
func (v *backend) apply(changed []netip.Prefix) error {
	cs := v.k.Changes(changed)
	var errs []error
	for _, d := range []*vtepDev{v.dev4, v.dev6} {
		if d != nil && d.fam.On() {
			errs = append(errs, v.applyDev(d, cs))
		}
	}
	return errors.Join(errs...)
}

// applyDev writes the changed peers' entries of d's family: first what the present
// peers need (route, neighbour, fdb: replaced in place), then what the gone ones (or
// a peer's old subnet or VtepMAC) leave behind.
func (v *backend) applyDev(d *vtepDev, cs []kernel.Change) error {
	f := d.fam
	idx := v.devIndex(d)
	var errs []error
	var gone []kernel.Change
	for _, c := range cs {
		old := c.Old[f.Index()]
		var r netlink.Route
		var e kernel.Entries
		var mac net.HardwareAddr
		ok := c.OK
		if ok {
			r, e, mac, ok = v.want(d, c.Lease, idx)
		}
		if !ok {
			if old.Dst.IsValid() {
				gone = append(gone, c)
			}
			continue
		}
		if mac != nil {
			n := netlink.Neigh{LinkIndex: idx, Family: f.NL, State: netlink.NUD_PERMANENT,
				IP: net.IP(e.GW.AsSlice()), HardwareAddr: mac}
			if err := v.nl.NeighSet(&n); err != nil {
				errs = append(errs, fmt.Errorf("neighbour %v: %w", e.GW, err))
			} else {
				v.k.Placed(kernel.Slot(f, "neigh"), e.GW.String(), true)
			}
			fe := netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT,
				Flags: netlink.NTF_SELF, IP: net.IP(e.Pub.AsSlice()), HardwareAddr: mac}
			if err := v.nl.NeighSet(&fe); err != nil {
				errs = append(errs, fmt.Errorf("fdb %s: %w", e.MAC, err))
			} else {
				v.k.Placed(kernel.Slot(f, "fdb"), e.MAC, true)
			}
		}
		// The route takes the old one's place whatever its link (same destination);
		// a peer whose subnet of the family changed leaves the old one behind.
		if err := v.k.ReplaceRoute(f, r); err != nil {
			errs = append(errs, err)
		}
		macFree := v.k.SetApplied(c.Key, f, e)
		moved := old.Dst.IsValid() && old.Dst != e.Dst
		taken := moved && v.k.Claimed(old.Dst, c.Key)
		if moved && !taken {
			errs = append(errs, v.k.DeleteRoute(f, old.Dst, old.Link))
		}
		if old.Dst.IsValid() && old.MAC != "" {
			errs = append(errs, v.removeNeighbours(f, idx, old, (mac == nil || old.GW != e.GW) && !taken, macFree))
		}
	}
	// A gone peer's subnet another peer took in this batch keeps its (new) entries.
	for _, c := range gone {
		old := c.Old[f.Index()]
		macFree := v.k.SetApplied(c.Key, f, kernel.Entries{})
		taken := v.k.Claimed(old.Dst, c.Key)
		if !taken {
			errs = append(errs, v.k.DeleteRoute(f, old.Dst, old.Link))
		}
		if old.MAC != "" {
			errs = append(errs, v.removeNeighbours(f, idx, old, !taken, macFree))
		}
	}
	return errors.Join(errs...)
}

// removeNeighbours removes what old put in the kernel beside its route: the neighbour
// entry (neigh) and the fdb entry (fdb, when no other peer of the family uses its
// MAC). Entries already gone are fine.
func (v *backend) removeNeighbours(f encap.Family, idx int, old kernel.Entries, neigh, fdb bool) error {
	var errs []error
	gone := func(err error) bool { return err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) }
	if neigh {
		v.k.Placed(kernel.Slot(f, "neigh"), old.GW.String(), false)
		n := netlink.Neigh{LinkIndex: idx, Family: f.NL, IP: net.IP(old.GW.AsSlice())}
		if err := v.nl.NeighDel(&n); !gone(err) {
			errs = append(errs, fmt.Errorf("remove neighbour %v: %w", old.GW, err))
		}
	}
	if fdb {
		v.k.Placed(kernel.Slot(f, "fdb"), old.MAC, false)
		hw, _ := net.ParseMAC(old.MAC)
		fe := netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
			IP: net.IP(old.Pub.AsSlice()), HardwareAddr: hw}
		if err := v.nl.NeighDel(&fe); !gone(err) {
			errs = append(errs, fmt.Errorf("remove fdb %s: %w", old.MAC, err))
		}
	}
	return errors.Join(errs...)
}

func (v *backend) syncNeighbours(f encap.Family, idx int, want map[netip.Addr]net.HardwareAddr, prune bool) error {
	v.k.Count("netlink_lists")
	have, err := v.nl.NeighList(idx, f.NL)
	if err != nil {
		return fmt.Errorf("list neighbours of device %d: %w", idx, err)
	}
	got := map[netip.Addr]netlink.Neigh{}
	for _, n := range have {
		if ip, ok := netip.AddrFromSlice(n.IP); ok {
			got[ip.Unmap()] = n
		}
	}
	var errs []error
	inPlace, written := map[string]bool{}, map[string]bool{}
	for ip, mac := range want {
		if n, ok := got[ip]; ok && n.HardwareAddr.String() == mac.String() && n.State&netlink.NUD_PERMANENT != 0 {
			inPlace[ip.String()] = true
			continue
		}
		n := netlink.Neigh{LinkIndex: idx, Family: f.NL, State: netlink.NUD_PERMANENT, IP: net.IP(ip.AsSlice()), HardwareAddr: mac}
		if err := v.nl.NeighSet(&n); err != nil {
			errs = append(errs, fmt.Errorf("neighbour %v: %w", ip, err))
			continue
		}
		inPlace[ip.String()], written[ip.String()] = true, true
	}
	v.k.SettleIn(kernel.Slot(f, "neigh"), "neigh", inPlace, written)
	if prune {
		for ip, n := range got {
			if _, ok := want[ip]; !ok && f.On() && f.Network.Contains(ip) && n.State&netlink.NUD_PERMANENT != 0 {
				if err := v.nl.NeighDel(&n); err != nil {
					errs = append(errs, fmt.Errorf("remove stale neighbour %v: %w", ip, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

func (v *backend) syncFDB(f encap.Family, idx int, want map[string]netip.Addr, prune bool) error {
	v.k.Count("netlink_lists")
	have, err := v.nl.NeighList(idx, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("list fdb of device %d: %w", idx, err)
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
	v.k.SettleIn(kernel.Slot(f, "fdb"), "fdb", inPlace, written)
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
