package proxy

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// table6 is the IPv6 side of a Snapshot: the same slot-per-subnet array as the IPv4
// side, indexed by the subnet bits of a 128-bit address held as two big-endian
// uint64 halves. It is immutable once in a Snapshot.
type table6 struct {
	netHi, netLo   uint64 // the network's first address
	maskHi, maskLo uint64 // mask of the whole network
	shift          uint   // 128 - subnet length
	subnetLen      int
	network        netip.Prefix
	local          netip.Prefix // our IPv6 subnet, when valid
	locHi, locLo   uint64
	subHi, subLo   uint64 // mask of one subnet
	bySubnet       []*Peer
}

// halves splits an IPv6 address into its big-endian halves.
func halves(a netip.Addr) (hi, lo uint64) {
	b := a.As16()
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}

// mask128 is the mask of a /bits IPv6 prefix as two halves.
func mask128(bits int) (hi, lo uint64) {
	switch {
	case bits <= 0:
		return 0, 0
	case bits <= 64:
		return ^uint64(0) << (64 - bits), 0
	default:
		return ^uint64(0), ^uint64(0) << (128 - bits)
	}
}

func newTable6(network netip.Prefix, subnetLen int) (*table6, error) {
	if !network.Addr().Is6() || network.Addr().Is4In6() || network.Addr().Zone() != "" {
		return nil, fmt.Errorf("%w: network %v is not IPv6", ErrBadRoute, network)
	}
	bits := subnetLen - network.Bits()
	if subnetLen > 128 || bits < 0 || bits > maxIndexBits {
		return nil, fmt.Errorf("%w: subnet length %d in network %v (at most 2^%d subnets)",
			ErrBadRoute, subnetLen, network, maxIndexBits)
	}
	network = network.Masked()
	t := &table6{shift: uint(128 - subnetLen), subnetLen: subnetLen, network: network, bySubnet: make([]*Peer, 1<<bits)}
	t.netHi, t.netLo = halves(network.Addr())
	t.maskHi, t.maskLo = mask128(network.Bits())
	t.subHi, t.subLo = mask128(subnetLen)
	return t, nil
}

func (t *table6) clone() *table6 {
	n := *t
	n.bySubnet = append([]*Peer(nil), t.bySubnet...)
	return &n
}

// slot is the index of the subnet holding hi:lo, or -1 outside the network.
func (t *table6) slot(hi, lo uint64) int {
	if hi&t.maskHi != t.netHi || lo&t.maskLo != t.netLo {
		return -1
	}
	var i uint64
	if t.shift >= 64 {
		i = hi >> (t.shift - 64)
	} else {
		i = hi<<(64-t.shift) | lo>>t.shift
	}
	return int(i & uint64(len(t.bySubnet)-1))
}

// index returns the slot of the subnet p, or an error if p is not one of the
// network's subnets.
func (t *table6) index(p netip.Prefix) (int, error) {
	if !p.Addr().Is6() || p.Addr().Is4In6() || p.Bits() != t.subnetLen {
		return -1, fmt.Errorf("%w: subnet %v is not an IPv6 /%d", ErrBadRoute, p, t.subnetLen)
	}
	hi, lo := halves(p.Addr())
	i := t.slot(hi, lo)
	if i < 0 || hi&^t.subHi != 0 || lo&^t.subLo != 0 {
		return -1, fmt.Errorf("%w: subnet %v is not a subnet of the IPv6 network", ErrBadRoute, p)
	}
	return i, nil
}

// lookup returns the peer whose subnet holds hi:lo, or nil.
func (t *table6) lookup(hi, lo uint64) *Peer {
	i := t.slot(hi, lo)
	if i < 0 {
		return nil
	}
	return t.bySubnet[i]
}

func (t *table6) isLocal(hi, lo uint64) bool {
	return t.local.IsValid() && hi&t.subHi == t.locHi && lo&t.subLo == t.locLo
}

// EnableIPv6 gives the table an IPv6 side for network, whose leases are all
// /subnetLen (lease.Lease.IPv6Subnet); lookups on it are as lock- and
// allocation-free as the IPv4 ones. It must come before IPv6 routes.
func (t *Table) EnableIPv6(network netip.Prefix, subnetLen int) error {
	v6, err := newTable6(network, subnetLen)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.snap.Load().clone()
	if n.v6 != nil {
		return fmt.Errorf("%w: the table already has the IPv6 network %v", ErrBadRoute, n.v6.network)
	}
	n.v6 = v6
	t.snap.Store(n)
	return nil
}

// Lookup6 returns the peer whose IPv6 subnet holds the address hi:lo (its big-endian
// halves), or nil (also when the table has no IPv6 side).
func (s *Snapshot) Lookup6(hi, lo uint64) *Peer {
	if s.v6 == nil {
		return nil
	}
	return s.v6.lookup(hi, lo)
}

// HoldsLease6 reports whether the IPv6 public address ip holds a lease.
func (s *Snapshot) HoldsLease6(ip [16]byte) bool { return s.byIP6[ip] > 0 }
