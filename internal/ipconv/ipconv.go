// Package ipconv converts between net/netip values and the forms other code needs:
// IPv4 addresses as big-endian uint32 (table indexes, subnet arithmetic) and prefixes
// as *net.IPNet (netlink).
package ipconv

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// U32 is the IPv4 address a as a big-endian number (192.0.2.1 is 0xc0000201).
func U32(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

// FromU32 is the IPv4 address whose big-endian number is v.
func FromU32(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// IPNet is p as a *net.IPNet, for netlink (IPv4 or IPv6).
func IPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
