package wireguard

import (
	"net/netip"
	"sync/atomic"

	"golang.zx2c4.com/wireguard/tun"
)

// relayCounter counts the packets a userspace device sends to its peers that came
// from another peer: the kernel forwarded them from flannel-wg back to flannel-wg,
// so this host relays them. A packet is ours when its source is in one of our
// subnets (own); any other source in the overlay (the networks) is a peer's.
type relayCounter struct {
	own      atomic.Pointer[[]netip.Prefix]
	networks []netip.Prefix
	packets  atomic.Uint64
	bytes    atomic.Uint64
}

// countingTUN is a TUN device whose reads (packets on their way to peers) are
// counted by a relayCounter.
type countingTUN struct {
	tun.Device
	c *relayCounter
}

func (t *countingTUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n, err := t.Device.Read(bufs, sizes, offset)
	for i := 0; i < n; i++ {
		t.c.count(bufs[i][offset : offset+sizes[i]])
	}
	return n, err
}

// count counts packet p when it is relayed.
func (c *relayCounter) count(p []byte) {
	src, ok := sourceOf(p)
	if !ok {
		return
	}
	if own := c.own.Load(); own != nil {
		for _, o := range *own {
			if o.Contains(src) {
				return
			}
		}
	}
	for _, n := range c.networks {
		if n.Contains(src) {
			c.packets.Add(1)
			c.bytes.Add(uint64(len(p)))
			return
		}
	}
}

// sourceOf is the source address of IP packet p.
func sourceOf(p []byte) (netip.Addr, bool) {
	switch {
	case len(p) >= 20 && p[0]>>4 == 4:
		return netip.AddrFrom4([4]byte(p[12:16])), true
	case len(p) >= 40 && p[0]>>4 == 6:
		return netip.AddrFrom16([16]byte(p[8:24])), true
	}
	return netip.Addr{}, false
}
