package etcd

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"net/netip"

	"github.com/weftnet/weft/lease"
)

// randomTriesV6 is how many random IPv6 subnets are tried before the ordered walk.
const randomTriesV6 = 32

// pickV6 chooses a free IPv6 subnet between IPv6SubnetMin and IPv6SubnetMax: one that
// overlaps none of taken. An IPv6 range holds up to 2^124 subnets, too many to list,
// so it first tries random ones (spreading hosts as flanneld's random pick does), then
// walks the range from IPv6SubnetMin, jumping past each taken prefix it meets: at most
// len(taken)+1 steps, so a free subnet is found whenever one exists.
func pickV6(c *lease.Config, taken []netip.Prefix) (netip.Prefix, error) {
	bits := c.IPv6SubnetLen
	step := new(big.Int).Lsh(big.NewInt(1), uint(128-bits))
	lo, hi := addrInt(c.IPv6SubnetMin), addrInt(c.IPv6SubnetMax)
	n := new(big.Int).Sub(hi, lo)
	n.Div(n, step).Add(n, big.NewInt(1))
	for range randomTriesV6 {
		i, err := rand.Int(rand.Reader, n)
		if err != nil {
			break // no randomness: the walk below still finds one
		}
		p := netip.PrefixFrom(intAddr(i.Mul(i, step).Add(i, lo)), bits)
		if _, hit := overlapping(p, taken); !hit {
			return p, nil
		}
	}
	for a := c.IPv6SubnetMin; !c.IPv6SubnetMax.Less(a); {
		p := netip.PrefixFrom(a, bits)
		q, hit := overlapping(p, taken)
		if !hit {
			return p, nil
		}
		// Past whichever of p and q ends later; both end on a subnet boundary.
		end := lastAddr(p)
		if e := lastAddr(q); end.Less(e) {
			end = e
		}
		a = end.Next()
		if !a.IsValid() { // wrapped past ffff:...:ffff
			break
		}
	}
	return netip.Prefix{}, fmt.Errorf("%w in IPv6Network %v between %v and %v", ErrNoFreeSubnet,
		c.IPv6Network, c.IPv6SubnetMin, c.IPv6SubnetMax)
}

// overlapping returns the first of taken that overlaps p.
func overlapping(p netip.Prefix, taken []netip.Prefix) (netip.Prefix, bool) {
	for _, q := range taken {
		if q.Overlaps(p) {
			return q, true
		}
	}
	return netip.Prefix{}, false
}

func addrInt(a netip.Addr) *big.Int {
	b := a.As16()
	return new(big.Int).SetBytes(b[:])
}

func intAddr(i *big.Int) netip.Addr {
	var b [16]byte
	i.FillBytes(b[:])
	return netip.AddrFrom16(b)
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
