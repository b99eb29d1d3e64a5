package etcd

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/weftnet/weft/lease"
)

// FuzzPickV6: on any small IPv6 network (a /120 with /126 subnets: 64 of them) and any
// set of taken prefixes of any length in it, pickV6 returns an aligned subnet in
// range that overlaps none of them, or ErrNoFreeSubnet exactly when there is none.
func FuzzPickV6(f *testing.F) {
	f.Add(uint8(4), uint8(252), []byte{0, 121, 128, 126})
	f.Add(uint8(4), uint8(4), []byte{4, 126})
	f.Add(uint8(0), uint8(255), []byte{})
	f.Add(uint8(16), uint8(32), []byte{16, 124, 32, 126, 20, 126})
	f.Fuzz(func(t *testing.T, lo, hi uint8, raw []byte) {
		lo, hi = lo&^3, hi&^3
		if lo == 0 {
			lo = 4
		}
		cfg, err := lease.ParseConfig([]byte(`{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:db8::/120","IPv6SubnetLen":126,` +
			`"IPv6SubnetMin":"` + v6At(lo).String() + `","IPv6SubnetMax":"` + v6At(hi).String() + `"}`))
		if err != nil {
			return // hi below lo
		}
		var taken []netip.Prefix
		for i := 0; i+1 < len(raw); i += 2 {
			bits := 120 + int(raw[i+1])%9
			taken = append(taken, netip.PrefixFrom(v6At(raw[i]), bits).Masked())
		}
		p, err := pickV6(cfg, taken)
		free := false
		for a := int(lo); a <= int(hi); a += 4 {
			if _, hit := overlapping(netip.PrefixFrom(v6At(uint8(a)), 126), taken); !hit {
				free = true
			}
		}
		if err != nil {
			if !errors.Is(err, ErrNoFreeSubnet) || free {
				t.Fatalf("pickV6(%v..%v, %v) = %v; a subnet is free: %v", lo, hi, taken, err, free)
			}
			return
		}
		if !cfg.InRangeV6(p) {
			t.Fatalf("pickV6 = %v, not in %v..%v", p, cfg.IPv6SubnetMin, cfg.IPv6SubnetMax)
		}
		if q, hit := overlapping(p, taken); hit {
			t.Fatalf("pickV6 = %v, overlapping the taken %v", p, q)
		}
	})
}

// v6At is fd00:db8::<b>.
func v6At(b uint8) netip.Addr { return netip.AddrFrom16([16]byte{0xfd, 0, 0x0d, 0xb8, 15: b}) }
