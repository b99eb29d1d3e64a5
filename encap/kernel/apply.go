package kernel

import (
	"net/netip"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// Programmed is what a kernel backend put in the kernel for one peer, per family
// (indexed by encap.Family.Index: IPv4, IPv6).
type Programmed [2]Entries

// Entries is what a kernel backend put in the kernel for one peer in one family.
type Entries struct {
	Dst  netip.Prefix // the route's destination (invalid: nothing of the family)
	Link int          // the route's link
	MAC  string       // vxlan: the VtepMAC of its neighbour and fdb entries ("" for none)
	GW   netip.Addr   // vxlan: the neighbour entry's address
	Pub  netip.Addr   // vxlan: the fdb entry's destination
}

// Change is one peer's change for a backend's apply pass.
type Change struct {
	Key   netip.Prefix // encap.PeerKey
	Lease lease.Lease
	OK    bool       // false: the peer is gone
	Old   Programmed // per family; a family's Dst is invalid where nothing was applied
}

// Changes returns, for each changed peer (by peerKey), the peer's lease (ok false
// when it is gone) and what was applied for it in each family.
func (k *Peers) Changes(changed []netip.Prefix) []Change {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]Change, 0, len(changed))
	for _, s := range changed {
		c := Change{Key: s}
		c.Lease, c.OK = k.peers[s]
		c.Old = k.applied[s]
		out = append(out, c)
	}
	return out
}

// SetApplied records what is now in the kernel for peer key in family f (e.Dst
// invalid: nothing); it reports whether the old entries' fdb MAC lost its last user.
func (k *Peers) SetApplied(key netip.Prefix, f encap.Family, e Entries) (macFree bool) {
	i := f.Index()
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.applied[key]
	old := p[i]
	if old.Dst.IsValid() && k.routed[old.Dst] == key {
		delete(k.routed, old.Dst)
	}
	p[i] = e
	if e.Dst.IsValid() {
		k.routed[e.Dst] = key
		if e.MAC != "" {
			k.macs[i][e.MAC]++
		}
	}
	if p == (Programmed{}) {
		delete(k.applied, key)
	} else {
		k.applied[key] = p
	}
	if old.Dst.IsValid() && old.MAC != "" {
		k.macs[i][old.MAC]--
		if k.macs[i][old.MAC] <= 0 {
			delete(k.macs[i], old.MAC)
			return true
		}
	}
	return false
}

// Claimed reports whether another peer than key holds the route to dst now (a subnet
// of one family that moved between peers in one batch): the old holder's removal must
// leave its entries alone.
func (k *Peers) Claimed(dst netip.Prefix, key netip.Prefix) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	other, ok := k.routed[dst]
	return ok && other != key
}

// ResetApplied replaces the record of what is in the kernel in family f (a full
// pass of f); applied is keyed by peerKey.
func (k *Peers) ResetApplied(f encap.Family, applied map[netip.Prefix]Entries) {
	i := f.Index()
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, p := range k.applied {
		if p[i].Dst.IsValid() {
			delete(k.routed, p[i].Dst)
		}
		p[i] = Entries{}
		if p == (Programmed{}) {
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
		k.routed[e.Dst] = key
		if e.MAC != "" {
			k.macs[i][e.MAC]++
		}
	}
}

// Placed notes a write (present) or a removal of one entry outside a full pass, so
// that the next full pass counts repairs right (see SettleIn); slot is the family's
// (Slot).
func (k *Peers) Placed(slot, key string, present bool) {
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
