package lab

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/weftnet/weft/lease"
)

// Overlay6 is the IPv6 overlay of the lab's IPv6 configurations (ULA space).
var Overlay6 = netip.MustParsePrefix("fd00:db8::/48")

// HostAddr6 is the IPv6 underlay address EnableIPv6 gives h: 2001:db8:<1 or 2 by LAN>::<the
// last byte of its IPv4 address>, in a /64 per LAN (documentation prefix).
func HostAddr6(h *Host) netip.Addr {
	a := [16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1}
	if h.LAN == LAN2 {
		a[5] = 2
	}
	a[15] = h.Addr.As4()[3]
	return netip.AddrFrom16(a)
}

// EnableIPv6 gives h's eth0 its HostAddr6 (without duplicate address detection, so it
// is usable at once) and turns IPv6 forwarding on. Hosts on one LAN reach each other
// over it directly; the router does not route IPv6.
func (l *Lab) EnableIPv6(ctx context.Context, h *Host) error {
	err := runAll(ctx, h.NS, [][]string{
		{"sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"},
		{"ip", "-6", "addr", "replace", HostAddr6(h).String() + "/64", "dev", "eth0", "nodad"},
	})
	if err != nil {
		return fmt.Errorf("host %s: IPv6: %w", h.Name, err)
	}
	return nil
}

// NetworkConfigV6With is NetworkConfigWith for an IPv6-only network on Overlay6
// (flannel's default /64 per host).
func NetworkConfigV6With(bt, opts string) string {
	if opts != "" {
		opts = "," + opts
	}
	return fmt.Sprintf(`{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":%q,"Backend":{"Type":%q%s}}`, Overlay6.String(), bt, opts)
}

// RefSubnet6 is the IPv6 subnet the reference configurations give a host:
// fd00:db8:0:<host index + 1>::/64.
func RefSubnet6(h *Host) netip.Prefix {
	a := Overlay6.Addr().As16()
	a[7] = byte(h.index + 1)
	return netip.PrefixFrom(netip.AddrFrom16(a), 64)
}

func refEnv6(h *Host, mtu int) lease.SubnetEnv {
	return lease.SubnetEnv{IPv6Network: Overlay6, IPv6Subnet: RefSubnet6(h), MTU: mtu}
}

// KernelHostGW6 is KernelHostGW for IPv6 only: a route to every other host's
// RefSubnet6 via its HostAddr6 (hosts need EnableIPv6).
func (l *Lab) KernelHostGW6(ctx context.Context, hosts []*Host) ([]lease.SubnetEnv, error) {
	envs := make([]lease.SubnetEnv, len(hosts))
	for i, h := range hosts {
		envs[i] = refEnv6(h, 1500)
		for _, o := range hosts {
			if o == h {
				continue
			}
			if err := runAll(ctx, h.NS, [][]string{
				{"ip", "-6", "route", "add", RefSubnet6(o).String(), "via", HostAddr6(o).String(), "dev", "eth0"},
			}); err != nil {
				return nil, fmt.Errorf("kernel host-gw IPv6 on %s: %w", h.Name, err)
			}
		}
	}
	return envs, nil
}

// RefVXLAN6Dev is the device KernelVXLAN6 makes.
const RefVXLAN6Dev = "kvx6.1"

// KernelVXLAN6 is KernelVXLAN for IPv6 only, the way flannel's vxlan backend makes
// flannel-v6.<VNI>: VXLAN over the IPv6 underlay (local HostAddr6, MTU 1430: the
// outer IPv6 header is 20 bytes longer), the subnet's first address on the device, and
// per peer a route via the peer's first address onlink, a permanent neighbour entry
// and an fdb entry to its HostAddr6.
func (l *Lab) KernelVXLAN6(ctx context.Context, hosts []*Host) ([]lease.SubnetEnv, error) {
	envs := make([]lease.SubnetEnv, len(hosts))
	for i, h := range hosts {
		envs[i] = refEnv6(h, 1430)
		err := runAll(ctx, h.NS, [][]string{
			{"ip", "link", "add", RefVXLAN6Dev, "address", vtepMAC(h), "type", "vxlan", "id", "1",
				"local", HostAddr6(h).String(), "dev", "eth0", "dstport", "8472", "nolearning"},
			{"ip", "link", "set", RefVXLAN6Dev, "mtu", "1430"},
			{"ip", "-6", "addr", "add", RefSubnet6(h).Addr().String() + "/128", "dev", RefVXLAN6Dev, "nodad"},
			{"ip", "link", "set", RefVXLAN6Dev, "up"},
		})
		if err != nil {
			return nil, fmt.Errorf("kernel vxlan IPv6 on %s: %w", h.Name, err)
		}
	}
	for _, h := range hosts {
		for _, o := range hosts {
			if o == h {
				continue
			}
			gw := RefSubnet6(o).Addr().String()
			err := runAll(ctx, h.NS, [][]string{
				{"ip", "-6", "neigh", "replace", gw, "lladdr", vtepMAC(o), "dev", RefVXLAN6Dev, "nud", "permanent"},
				{"bridge", "fdb", "append", vtepMAC(o), "dev", RefVXLAN6Dev, "dst", HostAddr6(o).String()},
				{"ip", "-6", "route", "add", RefSubnet6(o).String(), "via", gw, "dev", RefVXLAN6Dev, "onlink"},
			})
			if err != nil {
				return nil, fmt.Errorf("kernel vxlan IPv6 on %s: %w", h.Name, err)
			}
		}
	}
	return envs, nil
}
