package encap

import (
	"net/netip"

	"github.com/weftnet/weft/lease"
)

// isOwn reports whether l is our own lease (k.mu held).
func (k *kernelPeers) isOwn(l lease.Lease) bool {
	if hasV4(l) {
		return l.Subnet == k.own
	}
	return l.IPv6Subnet.IsValid() && l.IPv6Subnet == k.own6
}

// ownSubnet returns our subnet of family f.
func (k *kernelPeers) ownSubnet(f family) netip.Prefix {
	k.mu.Lock()
	defer k.mu.Unlock()
	if f.is6() {
		return k.own6
	}
	return k.own
}
