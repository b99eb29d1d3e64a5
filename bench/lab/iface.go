package lab

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/weftnet/weft/bench/netns"
)

// DeleteLAN deletes h's LAN interface, eth0, as an administrator re-creating a bond,
// VLAN or bridge does: the kernel removes with it its addresses and routes, and every
// device stacked on it (a VXLAN device made on it). The router's end of the veth goes
// too. RestoreLAN makes it again. A lab without router has none to delete (its hosts'
// eth0s are one veth).
func (l *Lab) DeleteLAN(ctx context.Context, h *Host) error {
	if l.spec.NoRouter {
		return fmt.Errorf("%w: host %s: a lab without router cannot delete a LAN interface", ErrSpec, h.Name)
	}
	if err := runAll(ctx, h.NS, [][]string{{"ip", "link", "del", "eth0"}}); err != nil {
		return fmt.Errorf("host %s: delete eth0: %w", h.Name, err)
	}
	return nil
}

// RestoreLAN makes h's eth0 again after DeleteLAN, as AddHost made it (a veth to its
// LAN's bridge, up, a /24 address, the default route via the router), so that it gets
// a new index. With newAddr false it has the address h was made with (h.Addr); with
// newAddr true the next free address of h's LAN. It returns the address; h.Addr stays
// the one h was made with. An IPv6 address (EnableIPv6) is not given again.
func (l *Lab) RestoreLAN(ctx context.Context, h *Host, newAddr bool) (netip.Addr, error) {
	if l.spec.NoRouter {
		return netip.Addr{}, fmt.Errorf("%w: host %s: a lab without router cannot restore a LAN interface", ErrSpec, h.Name)
	}
	br := "br1"
	if h.LAN == LAN2 {
		br = "br2"
	}
	addr := h.Addr
	if newAddr {
		l.mu.Lock()
		if l.next[h.LAN] > 254 {
			l.mu.Unlock()
			return netip.Addr{}, fmt.Errorf("%w: no free address left on %s", ErrSpec, h.LAN)
		}
		a4 := h.Addr.As4()
		a4[3] = byte(l.next[h.LAN])
		l.next[h.LAN]++
		l.mu.Unlock()
		addr = netip.AddrFrom4(a4)
	}
	port := fmt.Sprintf("p%d", h.index)
	if err := netns.Veth(h.NS, "eth0", l.router, port); err != nil {
		return addr, fmt.Errorf("host %s: veth: %w", h.Name, err)
	}
	if err := runAll(ctx, l.router, [][]string{{"ip", "link", "set", port, "master", br}}); err != nil {
		return addr, fmt.Errorf("host %s: %w", h.Name, err)
	}
	err := runAll(ctx, h.NS, [][]string{
		{"ip", "addr", "add", addr.String() + "/24", "dev", "eth0"},
		{"ip", "route", "add", "default", "via", h.Router.String()},
	})
	if err != nil {
		return addr, fmt.Errorf("host %s: %w", h.Name, err)
	}
	return addr, nil
}
