package lease

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseConfigIPv6(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		v4         bool
		network    string
		subnetLen  int
		min, max   string
	}{
		{"dual stack, /64 default", `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/48"}`,
			true, "fd00:db8::/48", 64, "fd00:db8:0:1::", "fd00:db8:0:ffff::"},
		{"/62 still /64", `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/62"}`,
			true, "fd00:db8::/62", 64, "fd00:db8:0:1::", "fd00:db8:0:3::"},
		{"/63 gives /65", `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/63"}`,
			true, "fd00:db8::/63", 65, "fd00:db8::8000:0:0:0", "fd00:db8:0:1:8000::"},
		{"/124 gives /126", `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00::/124"}`,
			true, "fd00::/124", 126, "fd00::4", "fd00::c"},
		{"lower-case keys", `{"network":"198.18.0.0/16","enableipv6":true,"ipv6network":"fd00::/56","ipv6subnetlen":60}`,
			true, "fd00::/56", 60, "fd00:0:0:10::", "fd00:0:0:f0::"},
		{"IPv6 only", `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00::/56","IPv6SubnetLen":126}`,
			false, "fd00::/56", 126, "fd00::4", "fd00:0:0:ff:ffff:ffff:ffff:fffc"},
		{"explicit min max", `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00::/56","IPv6SubnetMin":"fd00:0:0:10::","IPv6SubnetMax":"fd00:0:0:20::"}`,
			true, "fd00::/56", 64, "fd00:0:0:10::", "fd00:0:0:20::"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.json))
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			if !c.EnableIPv6 || c.EnableIPv4 != tc.v4 || c.IPv6Network != netip.MustParsePrefix(tc.network) ||
				c.IPv6SubnetLen != tc.subnetLen || c.IPv6SubnetMin != addr(tc.min) || c.IPv6SubnetMax != addr(tc.max) {
				t.Errorf("got v4 %v %v /%d %v..%v; want %v %s /%d %s..%s", c.EnableIPv4, c.IPv6Network, c.IPv6SubnetLen,
					c.IPv6SubnetMin, c.IPv6SubnetMax, tc.v4, tc.network, tc.subnetLen, tc.min, tc.max)
			}
			if !tc.v4 && (c.Network.IsValid() || c.SubnetLen != 0) {
				t.Errorf("IPv6-only config has IPv4 fields %v /%d", c.Network, c.SubnetLen)
			}
			if tc.v4 && c.Network != pfx("198.18.0.0/16") {
				t.Errorf("Network %v", c.Network)
			}
			if !c.InRangeV6(netip.PrefixFrom(c.IPv6SubnetMin, c.IPv6SubnetLen)) ||
				!c.InRangeV6(netip.PrefixFrom(c.IPv6SubnetMax, c.IPv6SubnetLen)) ||
				c.InRangeV6(netip.PrefixFrom(c.IPv6Network.Addr(), c.IPv6SubnetLen)) {
				t.Error("InRangeV6 disagrees with the bounds")
			}
			v6Only := Key{IPv6Subnet: netip.PrefixFrom(c.IPv6SubnetMin, c.IPv6SubnetLen)}
			v4Only := Key{Subnet: pfx("198.18.1.0/24")}
			if !c.Usable(v6Only) || c.Usable(v4Only) != tc.v4 {
				t.Errorf("Usable(%v) = %v, Usable(%v) = %v", v6Only, c.Usable(v6Only), v4Only, c.Usable(v4Only))
			}
		})
	}
	// Without EnableIPv6 the IPv6 keys are ignored, as flanneld ignores them.
	c, err := ParseConfig([]byte(`{"Network":"198.18.0.0/16","IPv6Network":"bogus"}`))
	if err != nil || c.EnableIPv6 || c.IPv6Network.IsValid() || !c.EnableIPv4 {
		t.Errorf("IPv6Network without EnableIPv6: %+v, %v", c, err)
	}
	if c.Usable(Key{IPv6Subnet: pfx("fd00::/64")}) || !c.Usable(Key{Subnet: pfx("198.18.1.0/24"), IPv6Subnet: pfx("fd00::/64")}) {
		t.Error("an IPv4 network uses IPv6-only leases, or not the IPv4 half of dual-stack ones")
	}
}

func TestParseConfigIPv6Errors(t *testing.T) {
	const v4 = `"Network":"198.18.0.0/16","EnableIPv6":true,`
	for _, tc := range []struct{ name, json, field string }{
		{"no IPv6Network", `{` + v4 + `"IPv6SubnetLen":64}`, "IPv6Network"},
		{"IPv6Network IPv4", `{` + v4 + `"IPv6Network":"198.19.0.0/16"}`, "IPv6Network"},
		{"IPv6Network 4in6", `{` + v4 + `"IPv6Network":"::ffff:198.19.0.0/112"}`, "IPv6Network"},
		{"IPv6Network no length", `{` + v4 + `"IPv6Network":"fd00::"}`, "IPv6Network"},
		{"IPv6Network host bits", `{` + v4 + `"IPv6Network":"fd00::1/64"}`, "IPv6Network"},
		{"IPv6Network too small", `{` + v4 + `"IPv6Network":"fd00::/125"}`, "IPv6Network"},
		{"IPv6SubnetLen 127", `{` + v4 + `"IPv6Network":"fd00::/64","IPv6SubnetLen":127}`, "IPv6SubnetLen"},
		{"IPv6SubnetLen two subnets", `{` + v4 + `"IPv6Network":"fd00::/64","IPv6SubnetLen":65}`, "IPv6SubnetLen"},
		{"IPv6SubnetLen negative", `{` + v4 + `"IPv6Network":"fd00::/64","IPv6SubnetLen":-1}`, "IPv6SubnetLen"},
		{"min outside", `{` + v4 + `"IPv6Network":"fd00::/56","IPv6SubnetMin":"fd01::"}`, "IPv6SubnetMin"},
		{"min unaligned", `{` + v4 + `"IPv6Network":"fd00::/56","IPv6SubnetMin":"fd00:0:0:1::1"}`, "IPv6SubnetMin"},
		{"min IPv4", `{` + v4 + `"IPv6Network":"fd00::/56","IPv6SubnetMin":"198.18.1.0"}`, "IPv6SubnetMin"},
		{"max outside", `{` + v4 + `"IPv6Network":"fd00::/56","IPv6SubnetMax":"fd00:0:0:100::"}`, "IPv6SubnetMax"},
		{"max below min", `{` + v4 + `"IPv6Network":"fd00::/56","IPv6SubnetMin":"fd00:0:0:20::","IPv6SubnetMax":"fd00:0:0:10::"}`, "IPv6SubnetMax"},
		{"neither family", `{"Network":"198.18.0.0/16","EnableIPv4":false}`, "EnableIPv4"},
		{"IPv6-only without IPv6Network", `{"EnableIPv4":false,"EnableIPv6":true}`, "IPv6Network"},
		{"dual stack keeps v4 checks", `{"EnableIPv6":true,"IPv6Network":"fd00::/56"}`, "Network"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.json))
			if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.field+":") {
				t.Errorf("ParseConfig(%s) = %+v, %v; want ErrBadConfig naming %s", tc.json, c, err, tc.field)
			}
		})
	}
}
