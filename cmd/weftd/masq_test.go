package main

import (
	"net/netip"
	"strings"
	"testing"
)

func TestMasqRules(t *testing.T) {
	network, subnet := netip.MustParsePrefix("198.18.0.0/16"), netip.MustParsePrefix("198.18.7.0/24")
	tests := []struct {
		name        string
		fullyRandom bool
		want        []string
	}{
		{"random fully", true, []string{
			"-m mark --mark 0x4000/0x4000 -m comment --comment weft masq -j RETURN",
			"-s 198.18.7.0/24 -d 198.18.0.0/16 -m comment --comment weft masq -j RETURN",
			"-s 198.18.0.0/16 -d 198.18.7.0/24 -m comment --comment weft masq -j RETURN",
			"! -s 198.18.0.0/16 -d 198.18.7.0/24 -m comment --comment weft masq -j RETURN",
			"-s 198.18.0.0/16 ! -d 224.0.0.0/4 -m comment --comment weft masq -j MASQUERADE --random-fully",
			"! -s 198.18.0.0/16 -d 198.18.0.0/16 -m comment --comment weft masq -j MASQUERADE --random-fully",
		}},
		{"plain", false, []string{
			"-m mark --mark 0x4000/0x4000 -m comment --comment weft masq -j RETURN",
			"-s 198.18.7.0/24 -d 198.18.0.0/16 -m comment --comment weft masq -j RETURN",
			"-s 198.18.0.0/16 -d 198.18.7.0/24 -m comment --comment weft masq -j RETURN",
			"! -s 198.18.0.0/16 -d 198.18.7.0/24 -m comment --comment weft masq -j RETURN",
			"-s 198.18.0.0/16 ! -d 224.0.0.0/4 -m comment --comment weft masq -j MASQUERADE",
			"! -s 198.18.0.0/16 -d 198.18.0.0/16 -m comment --comment weft masq -j MASQUERADE",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := masqRules(network, subnet, tt.fullyRandom)
			if len(got) != len(tt.want) {
				t.Fatalf("%d rules, want %d", len(got), len(tt.want))
			}
			for i, r := range got {
				if s := strings.Join(r, " "); s != tt.want[i] {
					t.Errorf("rule %d:\n got %s\nwant %s", i, s, tt.want[i])
				}
			}
		})
	}
}

func TestRestoreInput(t *testing.T) {
	rules := masqRules(netip.MustParsePrefix("198.18.0.0/16"), netip.MustParsePrefix("198.18.7.0/24"), false)
	got := string(restoreInput(rules[:2]))
	want := "*nat\n:WEFT-POSTRTG - [0:0]\n" +
		"-A WEFT-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment \"weft masq\" -j RETURN\n" +
		"-A WEFT-POSTRTG -s 198.18.7.0/24 -d 198.18.0.0/16 -m comment --comment \"weft masq\" -j RETURN\n" +
		"COMMIT\n"
	if got != want {
		t.Fatalf("restore input:\n%s\nwant:\n%s", got, want)
	}
}
