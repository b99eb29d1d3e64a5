package encap

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/internal/ipconv"
	"github.com/weftnet/weft/lease"
)

// changes returns, for each changed subnet, the peer's lease (ok false when it is
// gone) and what was applied for it (had false when nothing).
func (k *kernelPeers) changes(changed []netip.Prefix) []change {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]change, 0, len(changed))
	for _, s := range changed {
		c := change{subnet: s}
		c.lease, c.ok = k.peers[s]
		c.old, c.had = k.applied[s]
		out = append(out, c)
	}
	return out
}

// change is one peer's change for apply.
type change struct {
	subnet netip.Prefix
	lease  lease.Lease
	ok     bool
	old    programmed
	had    bool
}

// setApplied records what is (ok) or is no longer (!ok) in the kernel for subnet; it
// reports whether the old entry's fdb MAC lost its last user.
func (k *kernelPeers) setApplied(subnet netip.Prefix, p programmed, ok bool) (macFree bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	old, had := k.applied[subnet]
	if ok {
		k.applied[subnet] = p
		if p.mac != "" {
			k.macs[p.mac]++
		}
	} else {
		delete(k.applied, subnet)
	}
	if had && old.mac != "" {
		k.macs[old.mac]--
		if k.macs[old.mac] <= 0 {
			delete(k.macs, old.mac)
			return true
		}
	}
	return false
}

// resetApplied replaces the record of what is in the kernel (a full pass).
func (k *kernelPeers) resetApplied(applied map[netip.Prefix]programmed) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.applied = applied
	clear(k.macs)
	for _, p := range applied {
		if p.mac != "" {
			k.macs[p.mac]++
		}
	}
}

// placed notes a write (present) or a removal of one entry outside a full pass, so
// that the next full pass counts repairs right (see settle).
func (k *kernelPeers) placed(kind, key string, present bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := k.inPlace[kind]
	if m == nil {
		m = map[string]bool{}
		k.inPlace[kind] = m
	}
	if present {
		m[key] = true
	} else {
		delete(m, key)
	}
}

// replaceRoute writes one peer's route outside a full pass.
func (k *kernelPeers) replaceRoute(r netlink.Route) error {
	dst := routeKey(r)
	if err := k.nl.RouteReplace(&r); err != nil {
		return fmt.Errorf("route %v: %w", dst, err)
	}
	k.placed("route", dst.String(), true)
	return nil
}

// deleteRoute removes one peer's route on link outside a full pass; a route already
// gone is fine.
func (k *kernelPeers) deleteRoute(dst netip.Prefix, link int) error {
	k.placed("route", dst.String(), false)
	err := k.nl.RouteDel(&netlink.Route{Dst: ipconv.IPNet(dst), LinkIndex: link})
	if err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove route %v: %w", dst, err)
	}
	return nil
}
