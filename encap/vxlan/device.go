package vxlan

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
)

// vtepDev is one VXLAN device of the backend: flannel.<VNI> (IPv4) or
// flannel-v6.<VNI> (IPv6). Its fields after name are guarded by vxlan.devMu.
type vtepDev struct {
	fam   encap.Family
	name  string
	local netip.Addr // the underlay address it sends from

	mac   net.HardwareAddr
	index int
	addr  netip.Addr // our subnet's network address, once Register gave it
}

// errIncompatible marks an existing device whose settings differ from ours.
var errIncompatible = errors.New("incompatible device")

// ensureDevice adopts a compatible device d, or (re)creates it keeping its MAC, then
// sets MTU and, once Register gave it our subnet's address, address and state (up).
func (v *backend) ensureDevice(d *vtepDev) error {
	v.devMu.Lock()
	defer v.devMu.Unlock()
	link, err := v.nl.LinkByName(d.name)
	if err == nil {
		if cerr := v.compatible(d, link); cerr != nil {
			v.log.Warn("recreating the vxlan device", zap.String("dev", d.name), zap.Error(cerr))
			if d.mac == nil {
				d.mac = link.Attrs().HardwareAddr
			}
			if err := v.nl.LinkDel(link); err != nil {
				return fmt.Errorf("delete %s: %w", d.name, err)
			}
			link = nil
		}
	} else {
		link = nil
	}
	if link == nil {
		dev := &netlink.Vxlan{
			LinkAttrs:    netlink.LinkAttrs{Name: d.name, MTU: v.devMTU(d), HardwareAddr: d.mac},
			VxlanId:      v.opts.VNI,
			VtepDevIndex: v.k.External().Index,
			SrcAddr:      srcAddr(d.local),
			Port:         v.opts.Port,
			Learning:     v.opts.Learning,
			GBP:          v.opts.GBP,
		}
		if err := v.nl.LinkAdd(dev); err != nil {
			return fmt.Errorf("create %s: %w", d.name, err)
		}
		if link, err = v.nl.LinkByName(d.name); err != nil {
			return fmt.Errorf("find %s after creating it: %w", d.name, err)
		}
		v.log.Info("created the vxlan device", zap.String("dev", d.name), zap.Stringer("mac", link.Attrs().HardwareAddr))
		// As flanneld does: no router advertisements on the overlay device. A kernel
		// without IPv6 has no such knob, which is fine.
		_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+d.name+"/accept_ra", []byte("0"), 0o644)
	}
	d.mac, d.index = link.Attrs().HardwareAddr, link.Attrs().Index
	if link.Attrs().MTU != v.devMTU(d) {
		if err := v.nl.LinkSetMTU(link, v.devMTU(d)); err != nil {
			return fmt.Errorf("set MTU of %s: %w", d.name, err)
		}
	}
	// Up only with our subnet's address, as flanneld does: before a lease the device
	// stays down (no fe80::/64 route, nothing to send or receive).
	if !d.addr.IsValid() {
		return nil
	}
	if err := v.setAddr(d, link); err != nil {
		return err
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := v.nl.LinkSetUp(link); err != nil {
			return fmt.Errorf("set %s up: %w", d.name, err)
		}
	}
	return nil
}

// srcAddr is the device's local address: none when the interface has no address of
// the family (the kernel then picks one per packet).
func srcAddr(a netip.Addr) net.IP {
	if !a.IsValid() {
		return nil
	}
	return net.IP(a.AsSlice())
}

func (v *backend) compatible(d *vtepDev, link netlink.Link) error {
	x, ok := link.(*netlink.Vxlan)
	switch {
	case !ok:
		return fmt.Errorf("%w: %s is a %s, not vxlan", errIncompatible, d.name, link.Type())
	case x.VxlanId != v.opts.VNI:
		return fmt.Errorf("%w: VNI %d, want %d", errIncompatible, x.VxlanId, v.opts.VNI)
	case x.Port != v.opts.Port:
		return fmt.Errorf("%w: port %d, want %d", errIncompatible, x.Port, v.opts.Port)
	case x.VtepDevIndex != v.k.External().Index:
		return fmt.Errorf("%w: parent index %d, want %d", errIncompatible, x.VtepDevIndex, v.k.External().Index)
	case !x.SrcAddr.Equal(srcAddr(d.local)):
		return fmt.Errorf("%w: local %v, want %v", errIncompatible, x.SrcAddr, d.local)
	case x.GBP != v.opts.GBP:
		return fmt.Errorf("%w: gbp %v, want %v", errIncompatible, x.GBP, v.opts.GBP)
	case x.Learning != v.opts.Learning:
		return fmt.Errorf("%w: learning %v, want %v", errIncompatible, x.Learning, v.opts.Learning)
	}
	return nil
}

// setAddr leaves exactly our subnet's network address on the device, as a /32
// (IPv4) or /128 (IPv6) as flanneld assigns it; IPv6 link-local addresses stay.
func (v *backend) setAddr(d *vtepDev, link netlink.Link) error {
	addrs, err := v.nl.AddrList(link, d.fam.NL)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", d.name, err)
	}
	want := net.IP(d.addr.AsSlice())
	found := false
	for _, a := range addrs {
		ones, _ := a.Mask.Size()
		switch {
		case a.IP.IsLinkLocalUnicast():
			continue
		case a.IP.Equal(want) && ones == d.fam.HostBits():
			found = true
			continue
		}
		if err := v.nl.AddrDel(link, &a); err != nil {
			return fmt.Errorf("remove old address %v from %s: %w", a.IPNet, d.name, err)
		}
	}
	if found {
		return nil
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: want, Mask: net.CIDRMask(d.fam.HostBits(), d.fam.HostBits())}}
	if err := v.nl.AddrAdd(link, a); err != nil {
		return fmt.Errorf("add %v to %s: %w", d.addr, d.name, err)
	}
	return nil
}
