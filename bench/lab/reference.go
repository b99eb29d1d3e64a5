package lab

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/weftnet/weft/lease"
)

// RefSubnet is the overlay subnet the reference configurations give a host:
// 198.18.<host index + 1>.0/24.
func RefSubnet(h *Host) netip.Prefix {
	a := Overlay.Addr().As4()
	a[2] = byte(h.index + 1)
	return netip.PrefixFrom(netip.AddrFrom4(a), 24)
}

func refEnv(h *Host, mtu int) lease.SubnetEnv {
	return lease.SubnetEnv{Network: Overlay, Subnet: RefSubnet(h), MTU: mtu}
}

// KernelHostGW configures hosts (on one LAN) by hand the way host-gw does: a route to
// every other host's RefSubnet via that host. It returns each host's subnet.env
// equivalent, for AttachPod.
func (l *Lab) KernelHostGW(ctx context.Context, hosts []*Host) ([]lease.SubnetEnv, error) {
	envs := make([]lease.SubnetEnv, len(hosts))
	for i, h := range hosts {
		envs[i] = refEnv(h, 1500)
		for _, o := range hosts {
			if o == h {
				continue
			}
			if err := runAll(ctx, h.NS, [][]string{
				{"ip", "route", "add", RefSubnet(o).String(), "via", o.Addr.String(), "dev", "eth0"},
			}); err != nil {
				return nil, fmt.Errorf("kernel host-gw on %s: %w", h.Name, err)
			}
		}
	}
	return envs, nil
}

// vtepMAC is a fixed, locally administered MAC for h's reference VXLAN device.
func vtepMAC(h *Host) string {
	a := h.Addr.As4()
	return fmt.Sprintf("0a:58:%02x:%02x:%02x:%02x", a[0], a[1], a[2], a[3])
}

// RefVXLANDev is the device KernelVXLAN makes.
const RefVXLANDev = "kvx.1"

// KernelVXLAN configures hosts by hand the way flannel's vxlan backend does, with
// plain ip commands: device kvx.1 (VNI 1, port 8472, MTU 1450) holding the subnet's
// network address, and per peer a route via the peer's network address onlink, a
// permanent neighbour entry to the peer's VTEP MAC and an fdb entry to its address.
func (l *Lab) KernelVXLAN(ctx context.Context, hosts []*Host) ([]lease.SubnetEnv, error) {
	envs := make([]lease.SubnetEnv, len(hosts))
	for i, h := range hosts {
		envs[i] = refEnv(h, 1450)
		err := runAll(ctx, h.NS, [][]string{
			{"ip", "link", "add", RefVXLANDev, "address", vtepMAC(h), "type", "vxlan", "id", "1",
				"local", h.Addr.String(), "dev", "eth0", "dstport", "8472", "nolearning"},
			{"ip", "link", "set", RefVXLANDev, "mtu", "1450"},
			{"ip", "addr", "add", RefSubnet(h).Addr().String() + "/32", "dev", RefVXLANDev},
			{"ip", "link", "set", RefVXLANDev, "up"},
		})
		if err != nil {
			return nil, fmt.Errorf("kernel vxlan on %s: %w", h.Name, err)
		}
	}
	for _, h := range hosts {
		for _, o := range hosts {
			if o == h {
				continue
			}
			gw := RefSubnet(o).Addr().String()
			err := runAll(ctx, h.NS, [][]string{
				{"ip", "neigh", "replace", gw, "lladdr", vtepMAC(o), "dev", RefVXLANDev, "nud", "permanent"},
				{"bridge", "fdb", "append", vtepMAC(o), "dev", RefVXLANDev, "dst", o.Addr.String()},
				{"ip", "route", "add", RefSubnet(o).String(), "via", gw, "dev", RefVXLANDev, "onlink"},
			})
			if err != nil {
				return nil, fmt.Errorf("kernel vxlan on %s: %w", h.Name, err)
			}
		}
	}
	return envs, nil
}
