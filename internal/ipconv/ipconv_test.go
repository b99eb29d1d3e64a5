package ipconv

import (
	"net/netip"
	"testing"
)

func TestU32RoundTrip(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want uint32
	}{
		{"0.0.0.0", 0},
		{"192.0.2.1", 0xc0000201},
		{"198.18.255.254", 0xc612fffe},
		{"255.255.255.255", 0xffffffff},
	} {
		a := netip.MustParseAddr(tc.addr)
		if got := U32(a); got != tc.want {
			t.Errorf("U32(%s) = %#x, want %#x", a, got, tc.want)
		}
		if back := FromU32(tc.want); back != a {
			t.Errorf("FromU32(%#x) = %s, want %s", tc.want, back, a)
		}
	}
}

func TestIPNet(t *testing.T) {
	for _, s := range []string{"198.18.3.0/24", "192.0.2.7/32", "0.0.0.0/0", "2001:db8::/32", "fd00::1/128"} {
		p := netip.MustParsePrefix(s)
		if got := IPNet(p).String(); got != s {
			t.Errorf("IPNet(%s) = %s", s, got)
		}
	}
}
