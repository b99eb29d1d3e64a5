package udp

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/vishvananda/netlink"

	"github.com/weftnet/weft/encap"
)

// Paths lists a path per peer subnet in the table: through flannel0 from our
// subnet's first address, which flannel0 holds, to the peer's, which its flannel0
// holds (flanneld's as weftd's).
func (b *backend) Paths() []encap.Path {
	b.mu.Lock()
	own := b.own
	b.mu.Unlock()
	proto := "UDP " + strconv.Itoa(b.opts.Port)
	routes := b.table.Load().Routes()
	out := make([]encap.Path, 0, len(routes))
	for _, r := range routes {
		local := own.Subnet
		if r.Subnet.Addr().Is6() {
			local = own.IPv6Subnet
		}
		if !local.IsValid() || !r.PublicIP.IsValid() {
			continue
		}
		out = append(out, encap.Path{Backend: "udp", Subnet: r.Subnet, PublicIP: r.PublicIP,
			Overlay: r.Subnet.Masked().Addr(), Local: local.Masked().Addr(),
			Endpoint: netip.AddrPortFrom(r.PublicIP, uint16(b.opts.Port)), Proto: proto,
			MTU: b.opts.MTU, RouteMTU: b.mtus.Get(r.Subnet)})
	}
	return out
}

// SetRouteMTU gives the route to a peer's subnet on flannel0 an MTU of its own (a
// route more specific than the network's); 0 removes that route.
func (b *backend) SetRouteMTU(sn netip.Prefix, mtu int) error {
	link, err := netlink.LinkByName(UDPDevice)
	if err != nil {
		return fmt.Errorf("udp backend: %s: %w", UDPDevice, err)
	}
	if err := b.mtus.SetOn(link.Attrs().Index, sn, mtu); err != nil {
		return fmt.Errorf("udp backend: %w", err)
	}
	return nil
}

var (
	_ encap.PathLister     = (*backend)(nil)
	_ encap.RouteMTUSetter = (*backend)(nil)
)
