package encap

import (
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/weftnet/weft/lease"
)

// family is one address family of the overlay as the kernel backends see it: its
// netlink family, the network and the length of every lease's subnet in it.
type family struct {
	nl      int // netlink.FAMILY_V4 or FAMILY_V6
	network netip.Prefix
	bits    int
}

// v4 and v6 return the families of cfg; a family the config does not enable has an
// invalid network (see on).
func v4(cfg *lease.Config) family {
	return family{nl: netlink.FAMILY_V4, network: cfg.Network, bits: cfg.SubnetLen}
}

func v6(cfg *lease.Config) family {
	if !cfg.EnableIPv6 {
		return family{nl: netlink.FAMILY_V6}
	}
	return family{nl: netlink.FAMILY_V6, network: cfg.IPv6Network, bits: cfg.IPv6SubnetLen}
}

// on reports whether the config enables the family. IPv4 is on when the config has a
// Network (flannel's EnableIPv4 leaves it zero when false).
func (f family) on() bool { return f.network.IsValid() }

// idx is the family's index in per-family arrays: 0 IPv4, 1 IPv6.
func (f family) idx() int {
	if f.is6() {
		return 1
	}
	return 0
}

// is6 reports whether f is IPv6.
func (f family) is6() bool { return f.nl == netlink.FAMILY_V6 }

// subnet is l's subnet of family f (zero when it has none).
func (f family) subnet(l lease.Lease) netip.Prefix {
	if f.is6() {
		return l.IPv6Subnet
	}
	return l.Subnet
}

// publicIP is l's public address of family f (zero when it has none).
func (f family) publicIP(l lease.Lease) netip.Addr {
	if f.is6() {
		return l.Attrs.PublicIPv6
	}
	return l.Attrs.PublicIP
}

// backendData is l's BackendData of family f.
func (f family) backendData(l lease.Lease) []byte {
	if f.is6() {
		return l.Attrs.BackendV6Data
	}
	return l.Attrs.BackendData
}

// fits reports whether s is a subnet of the family's network of the leased length.
func (f family) fits(s netip.Prefix) bool {
	return f.on() && s.IsValid() && s.Bits() == f.bits && f.network.Contains(s.Addr())
}

// hostBits is the prefix length of a single address of the family.
func (f family) hostBits() int {
	if f.is6() {
		return 128
	}
	return 32
}

// peerKey is the key of a lease among the peers: its IPv4 subnet, or its IPv6 subnet
// on an IPv6-only network (flannel's key names no IPv4 subnet as 0.0.0.0/0).
func peerKey(l lease.Lease) netip.Prefix {
	if hasV4(l) {
		return l.Subnet
	}
	return l.IPv6Subnet
}

// hasV4 reports whether l has an IPv4 subnet.
func hasV4(l lease.Lease) bool { return l.Subnet.IsValid() && l.Subnet.Bits() > 0 }

// inScope reports whether a peer's lease belongs to the network in a family the
// config enables.
func inScope(cfg *lease.Config, l lease.Lease) bool {
	return v4(cfg).fits(l.Subnet) || v6(cfg).fits(l.IPv6Subnet)
}

// slot names the family's part of a kind of kernel entries (see settleIn).
func (f family) slot(kind string) string {
	if f.is6() {
		return kind + "6"
	}
	return kind
}

// extPublicIP is our public address of the family.
func (f family) extPublicIP(ext ExternalInterface) netip.Addr {
	if f.is6() {
		return ext.PublicIPv6
	}
	return ext.PublicIP
}
