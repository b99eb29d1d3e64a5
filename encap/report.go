package encap

// PeerCounter is implemented by backends that can say how many other hosts' leases
// they currently carry traffic for (weftd's weft_peers gauge).
type PeerCounter interface {
	Peers() int
}

// RepairReporter is implemented by the kernel backends: Repairs counts, by kind of
// kernel object ("device", "route", "neigh", "fdb"), how often the reconcile loop found
// an entry it had put in place missing or changed and wrote it again.
type RepairReporter interface {
	Repairs() map[string]uint64
}

// Peers returns the number of subnets in the udp data path's table.
func (b *udpBackend) Peers() int { return b.table.Load().Len() }

// Peers returns the number of peers the kernel backend programs.
func (k *kernelPeers) Peers() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.peers)
}

// Repairs returns the repairs by kind of kernel object.
func (k *kernelPeers) Repairs() map[string]uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]uint64, len(k.repairs))
	for n, v := range k.repairs {
		out[n] = v
	}
	return out
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
