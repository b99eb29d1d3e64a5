package kernel

import (
	"maps"

	"github.com/weftnet/weft/encap"
)

// Report returns the peers the kernel backend programs, its repairs and its other
// counters.
func (k *Peers) Report() encap.Report {
	k.mu.Lock()
	defer k.mu.Unlock()
	return encap.Report{Peers: len(k.peers), Repairs: maps.Clone(k.repairs), Counters: maps.Clone(k.counters)}
}

// SettleIn records one reconcile pass over the entries of kind in slot (kind, or one
// address family's part of it: "route6"): inPlace holds the keys that are now as
// wanted, written those the pass had to write. A key written again that was in place
// after the previous pass of the slot was removed or changed behind our back: a repair,
// counted under kind. A first write (a new peer) is not one.
func (k *Peers) SettleIn(slot, kind string, inPlace, written map[string]bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	prev := k.inPlace[slot]
	for key := range written {
		if prev[key] {
			k.repairs[kind]++
		}
	}
	k.inPlace[slot] = inPlace
}

// DeviceRepaired counts a device recreated after someone deleted it.
func (k *Peers) DeviceRepaired() {
	k.mu.Lock()
	k.repairs["device"]++
	k.mu.Unlock()
}

// Slot names the family's part of a kind of kernel entries (see SettleIn): kind for
// IPv4, kind+"6" for IPv6.
func Slot(f encap.Family, kind string) string {
	if f.Is6() {
		return kind + "6"
	}
	return kind
}
