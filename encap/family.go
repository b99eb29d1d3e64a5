package encap

import (
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/weftnet/weft/lease"
)

// Family is one address family of the overlay as the backends see it: its netlink
// family, the network and the length of every lease's subnet in it.
type Family struct {
	NL      int // netlink.FAMILY_V4 or FAMILY_V6
	Network netip.Prefix
	Bits    int
}

// V4 and V6 return the families of cfg; a family the config does not enable has an
// invalid network (see On).
func V4(cfg *lease.Config) Family {
	return Family{NL: netlink.FAMILY_V4, Network: cfg.Network, Bits: cfg.SubnetLen}
}

// V6 is the IPv6 family of cfg (see V4).
func V6(cfg *lease.Config) Family {
	if !cfg.EnableIPv6 {
		return Family{NL: netlink.FAMILY_V6}
	}
	return Family{NL: netlink.FAMILY_V6, Network: cfg.IPv6Network, Bits: cfg.IPv6SubnetLen}
}

// Families returns the families cfg enables, IPv4 first.
func Families(cfg *lease.Config) []Family {
	var out []Family
	for _, f := range []Family{V4(cfg), V6(cfg)} {
		if f.On() {
			out = append(out, f)
		}
	}
	return out
}

// On reports whether the config enables the family. IPv4 is on when the config has a
// Network (flannel's EnableIPv4 leaves it zero when false).
func (f Family) On() bool { return f.Network.IsValid() }

// Index is the family's index in per-family arrays: 0 IPv4, 1 IPv6.
func (f Family) Index() int {
	if f.Is6() {
		return 1
	}
	return 0
}

// Is6 reports whether f is IPv6.
func (f Family) Is6() bool { return f.NL == netlink.FAMILY_V6 }

// Subnet is l's subnet of family f (zero when it has none).
func (f Family) Subnet(l lease.Lease) netip.Prefix {
	if f.Is6() {
		return l.IPv6Subnet
	}
	return l.Subnet
}

// PublicIP is l's public address of family f (zero when it has none).
func (f Family) PublicIP(l lease.Lease) netip.Addr {
	if f.Is6() {
		return l.Attrs.PublicIPv6
	}
	return l.Attrs.PublicIP
}

// BackendData is l's BackendData of family f.
func (f Family) BackendData(l lease.Lease) []byte {
	if f.Is6() {
		return l.Attrs.BackendV6Data
	}
	return l.Attrs.BackendData
}

// Fits reports whether s is a subnet of the family's network of the leased length.
func (f Family) Fits(s netip.Prefix) bool {
	return f.On() && s.IsValid() && s.Bits() == f.Bits && f.Network.Contains(s.Addr())
}

// HostBits is the prefix length of a single address of the family.
func (f Family) HostBits() int {
	if f.Is6() {
		return 128
	}
	return 32
}

// ExtPublicIP is our public address of the family.
func (f Family) ExtPublicIP(ext ExternalInterface) netip.Addr {
	if f.Is6() {
		return ext.PublicIPv6
	}
	return ext.PublicIP
}

// PeerKey is the key of a lease among the peers: its IPv4 subnet, or its IPv6 subnet
// on an IPv6-only network (flannel's key names no IPv4 subnet as 0.0.0.0/0).
func PeerKey(l lease.Lease) netip.Prefix {
	if HasV4(l) {
		return l.Subnet
	}
	return l.IPv6Subnet
}

// HasV4 reports whether l has an IPv4 subnet.
func HasV4(l lease.Lease) bool { return l.Subnet.IsValid() && l.Subnet.Bits() > 0 }

// InScope reports whether a peer's lease belongs to the network in a family the
// config enables.
func InScope(cfg *lease.Config, l lease.Lease) bool {
	return V4(cfg).Fits(l.Subnet) || V6(cfg).Fits(l.IPv6Subnet)
}
