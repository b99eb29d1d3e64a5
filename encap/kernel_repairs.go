package encap

import "maps"

// Report returns the peers the kernel backend programs, its repairs and its other
// counters.
func (k *kernelPeers) Report() Report {
	k.mu.Lock()
	defer k.mu.Unlock()
	return Report{Peers: len(k.peers), Repairs: maps.Clone(k.repairs), Counters: maps.Clone(k.counters)}
}

// settleIn records one reconcile pass over the entries of kind in slot (kind, or one
// address family's part of it: "route6"): inPlace holds the keys that are now as
// wanted, written those the pass had to write. A key written again that was in place
// after the previous pass of the slot was removed or changed behind our back: a repair,
// counted under kind. A first write (a new peer) is not one.
func (k *kernelPeers) settleIn(slot, kind string, inPlace, written map[string]bool) {
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

// deviceRepaired counts a device recreated after someone deleted it.
func (k *kernelPeers) deviceRepaired() {
	k.mu.Lock()
	k.repairs["device"]++
	k.mu.Unlock()
}
