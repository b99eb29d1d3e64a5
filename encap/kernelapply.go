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

// changes returns, for each changed peer (by peerKey), the peer's lease (ok false
// when it is gone) and what was applied for it in each family.
func (k *kernelPeers) changes(changed []netip.Prefix) []change {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]change, 0, len(changed))
	for _, s := range changed {
		c := change{key: s}
		c.lease, c.ok = k.peers[s]
		c.old = k.applied[s]
		out = append(out, c)
	}
	return out
}

// change is one peer's change for apply.
type change struct {
	key   netip.Prefix // peerKey
	lease lease.Lease
	ok    bool
	old   programmed // per family; a family's dst is invalid where nothing was applied
}

// setApplied records what is now in the kernel for peer key in family f (e.dst
// invalid: nothing); it reports whether the old entries' fdb MAC lost its last user.
func (k *kernelPeers) setApplied(key netip.Prefix, f family, e entries) (macFree bool) {
	i := f.idx()
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.applied[key]
	old := p[i]
	if old.dst.IsValid() && k.routed[old.dst] == key {
		delete(k.routed, old.dst)
	}
	p[i] = e
	if e.dst.IsValid() {
		k.routed[e.dst] = key
		if e.mac != "" {
			k.macs[i][e.mac]++
		}
	}
	if p == (programmed{}) {
		delete(k.applied, key)
	} else {
		k.applied[key] = p
	}
	if old.dst.IsValid() && old.mac != "" {
		k.macs[i][old.mac]--
		if k.macs[i][old.mac] <= 0 {
			delete(k.macs[i], old.mac)
			return true
		}
	}
	return false
}

// claimed reports whether another peer than key holds the route to dst now (a subnet
// of one family that moved between peers in one batch): the old holder's removal must
// leave its entries alone.
func (k *kernelPeers) claimed(dst netip.Prefix, key netip.Prefix) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	other, ok := k.routed[dst]
	return ok && other != key
}

// resetApplied replaces the record of what is in the kernel in family f (a full
// pass of f); applied is keyed by peerKey.
func (k *kernelPeers) resetApplied(f family, applied map[netip.Prefix]entries) {
	i := f.idx()
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, p := range k.applied {
		if p[i].dst.IsValid() {
			delete(k.routed, p[i].dst)
		}
		p[i] = entries{}
		if p == (programmed{}) {
			delete(k.applied, key)
		} else {
			k.applied[key] = p
		}
	}
	clear(k.macs[i])
	for key, e := range applied {
		p := k.applied[key]
		p[i] = e
		k.applied[key] = p
		k.routed[e.dst] = key
		if e.mac != "" {
			k.macs[i][e.mac]++
		}
	}
}

// placed notes a write (present) or a removal of one entry outside a full pass, so
// that the next full pass counts repairs right (see settleIn); slot is the family's
// (family.slot).
func (k *kernelPeers) placed(slot, key string, present bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := k.inPlace[slot]
	if m == nil {
		m = map[string]bool{}
		k.inPlace[slot] = m
	}
	if present {
		m[key] = true
	} else {
		delete(m, key)
	}
}

// replaceRoute writes one peer's route of family f outside a full pass.
func (k *kernelPeers) replaceRoute(f family, r netlink.Route) error {
	dst := routeKey(r)
	if err := k.nl.RouteReplace(&r); err != nil {
		return fmt.Errorf("route %v: %w", dst, err)
	}
	k.placed(f.slot("route"), dst.String(), true)
	return nil
}

// deleteRoute removes one peer's route of family f on link outside a full pass; a
// route already gone is fine.
func (k *kernelPeers) deleteRoute(f family, dst netip.Prefix, link int) error {
	k.placed(f.slot("route"), dst.String(), false)
	err := k.nl.RouteDel(&netlink.Route{Dst: ipconv.IPNet(dst), LinkIndex: link})
	if err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove route %v: %w", dst, err)
	}
	return nil
}
