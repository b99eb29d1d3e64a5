package firewall

import (
	"net/netip"
	"strings"
	"testing"
)

var (
	testNetwork = netip.MustParsePrefix("198.18.0.0/16")
	testSubnet  = netip.MustParsePrefix("198.18.7.0/24")
)

func TestMasqRules(t *testing.T) {
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
			got := masqRules(testNetwork, testSubnet, tt.fullyRandom).rules
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

// TestNFTMasqRulesMeanTheSame: each nftables rule tests what its iptables twin does.
func TestNFTMasqRulesMeanTheSame(t *testing.T) {
	for _, random := range []bool{false, true} {
		nft := nftMasqRules(testNetwork, testSubnet, random)
		want := []string{
			"meta mark & 0x4000 == 0x4000 counter return",
			"ip saddr 198.18.7.0/24 ip daddr 198.18.0.0/16 counter return",
			"ip saddr 198.18.0.0/16 ip daddr 198.18.7.0/24 counter return",
			"ip saddr != 198.18.0.0/16 ip daddr 198.18.7.0/24 counter return",
			"ip saddr 198.18.0.0/16 ip daddr != 224.0.0.0/4 counter masquerade",
			"ip saddr != 198.18.0.0/16 ip daddr 198.18.0.0/16 counter masquerade",
		}
		if random {
			want[4] += " fully-random"
			want[5] += " fully-random"
		}
		seen := map[string]bool{}
		for i, r := range nft {
			if r.rule != want[i] {
				t.Errorf("random=%v rule %d:\n got %s\nwant %s", random, i, r.rule, want[i])
			}
			if seen[r.comment] || !strings.HasPrefix(r.comment, "weft masq: ") {
				t.Errorf("rule %d: comment %q is not a unique weft masq comment", i, r.comment)
			}
			seen[r.comment] = true
		}
	}
}

func TestRestoreInput(t *testing.T) {
	s := forwardRules(testNetwork)
	stale := []string{
		`-A FORWARD -s 198.18.0.0/16 -m comment --comment "weft forward" -j ACCEPT`,
		`-A FORWARD -m comment --comment "weft forward" -j WEFT-FWD`,
	}
	got := string(s.restoreInput(stale))
	want := "*filter\n:WEFT-FWD - [0:0]\n" +
		"-A WEFT-FWD -s 198.18.0.0/16 -m comment --comment \"weft forward\" -j ACCEPT\n" +
		"-A WEFT-FWD -d 198.18.0.0/16 -m comment --comment \"weft forward\" -j ACCEPT\n" +
		"-D FORWARD -s 198.18.0.0/16 -m comment --comment \"weft forward\" -j ACCEPT\n" +
		"-D FORWARD -m comment --comment \"weft forward\" -j WEFT-FWD\n" +
		"-A FORWARD -m comment --comment \"weft forward\" -j WEFT-FWD\n" +
		"COMMIT\n"
	if got != want {
		t.Fatalf("restore input:\n%s\nwant:\n%s", got, want)
	}
	got = string(s.removeInput(stale[1:], true))
	want = "*filter\n-D FORWARD -m comment --comment \"weft forward\" -j WEFT-FWD\n-F WEFT-FWD\n-X WEFT-FWD\nCOMMIT\n"
	if got != want {
		t.Fatalf("remove input:\n%s\nwant:\n%s", got, want)
	}
}

func TestRuleSetState(t *testing.T) {
	listing := `-P FORWARD DROP
-N KUBE-FORWARD
-N WEFT-FWD
-A FORWARD -j KUBE-FORWARD
-A FORWARD -m comment --comment "weft forward" -j WEFT-FWD
-A FORWARD -d 198.18.0.0/16 -m comment --comment "weft forward" -j ACCEPT
-A FORWARD -s 192.0.2.0/24 -j ACCEPT
-A KUBE-FORWARD -j ACCEPT
-A WEFT-FWD -s 198.18.0.0/16 -m comment --comment "weft forward" -j ACCEPT
`
	st := forwardRules(testNetwork).state(listing)
	if !st.exists || len(st.rules) != 1 || len(st.hooks) != 2 {
		t.Fatalf("state %+v: want the chain, 1 rule in it, 2 rules of ours in FORWARD", st)
	}
	if st.same(forwardRules(testNetwork).state(strings.Replace(listing, "-A WEFT-FWD -s", "-A WEFT-FWD -d", 1))) {
		t.Fatal("a changed rule compares the same")
	}
	if !st.same(forwardRules(testNetwork).state(listing + "-A FORWARD -j DROP\n")) {
		t.Fatal("another tool's rule in FORWARD makes ours look changed")
	}
}

func TestIptablesVersion(t *testing.T) {
	for _, tc := range []struct {
		out    string
		random bool
		bad    bool
	}{
		{"iptables v1.8.9 (nf_tables)\n", true, false},
		{"iptables v1.8.7 (legacy)\n", true, false},
		{"iptables v1.6.2\n", true, false},
		{"iptables v1.6.1\n", false, false},
		{"iptables v1.4.21\n", false, false},
		{"iptables v2.0\n", true, false},
		{"ip6tables v1.8.9\n", false, true},
		{"iptables vX.Y\n", false, true},
		{"", false, true},
	} {
		v, err := parseIptablesVersion(tc.out)
		if (err != nil) != tc.bad {
			t.Errorf("%q: error %v, want bad=%v", tc.out, err, tc.bad)
			continue
		}
		if err == nil && randomFullyVersion(v) != tc.random {
			t.Errorf("%q: version %v random-fully %v, want %v", tc.out, v, !tc.random, tc.random)
		}
	}
}

func TestNFTForwardRules(t *testing.T) {
	got := nftForwardRules(testNetwork)
	want := []string{"ip saddr 198.18.0.0/16 counter accept", "ip daddr 198.18.0.0/16 counter accept"}
	if len(got) != len(want) {
		t.Fatalf("%d rules, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].rule != want[i] || !strings.HasPrefix(got[i].comment, "weft forward: ") {
			t.Errorf("rule %d: %+v, want %q with a weft forward comment", i, got[i], want[i])
		}
	}
}
