package firewall

import (
	"net/netip"
	"strings"
	"testing"
)

var (
	testNetwork6 = netip.MustParsePrefix("fd00:1::/48")
	testSubnet6  = netip.MustParsePrefix("fd00:1:0:7::/64")
)

// TestMasqRulesV6: the IPv6 rules are the IPv4 ones with the IPv6 network, subnet and
// multicast range (ff00::/8, as flanneld's), in both implementations.
func TestMasqRulesV6(t *testing.T) {
	ipt := []string{
		"-m mark --mark 0x4000/0x4000 -m comment --comment weft masq -j RETURN",
		"-s fd00:1:0:7::/64 -d fd00:1::/48 -m comment --comment weft masq -j RETURN",
		"-s fd00:1::/48 -d fd00:1:0:7::/64 -m comment --comment weft masq -j RETURN",
		"! -s fd00:1::/48 -d fd00:1:0:7::/64 -m comment --comment weft masq -j RETURN",
		"-s fd00:1::/48 ! -d ff00::/8 -m comment --comment weft masq -j MASQUERADE",
		"! -s fd00:1::/48 -d fd00:1::/48 -m comment --comment weft masq -j MASQUERADE",
	}
	nft := []string{
		"meta mark & 0x4000 == 0x4000 counter return",
		"ip6 saddr fd00:1:0:7::/64 ip6 daddr fd00:1::/48 counter return",
		"ip6 saddr fd00:1::/48 ip6 daddr fd00:1:0:7::/64 counter return",
		"ip6 saddr != fd00:1::/48 ip6 daddr fd00:1:0:7::/64 counter return",
		"ip6 saddr fd00:1::/48 ip6 daddr != ff00::/8 counter masquerade",
		"ip6 saddr != fd00:1::/48 ip6 daddr fd00:1::/48 counter masquerade",
	}
	gotIPT := masqRules(testNetwork6, testSubnet6, false).rules
	gotNFT := nftMasqRules(testNetwork6, testSubnet6, false)
	if len(gotIPT) != len(ipt) || len(gotNFT) != len(nft) {
		t.Fatalf("%d iptables and %d nftables rules, want %d and %d", len(gotIPT), len(gotNFT), len(ipt), len(nft))
	}
	for i := range ipt {
		if s := strings.Join(gotIPT[i], " "); s != ipt[i] {
			t.Errorf("iptables rule %d:\n got %s\nwant %s", i, s, ipt[i])
		}
		if gotNFT[i].rule != nft[i] {
			t.Errorf("nftables rule %d:\n got %s\nwant %s", i, gotNFT[i].rule, nft[i])
		}
	}
	fwd := nftForwardRules(testNetwork6)
	if len(fwd) != 2 || fwd[0].rule != "ip6 saddr fd00:1::/48 counter accept" || fwd[1].rule != "ip6 daddr fd00:1::/48 counter accept" {
		t.Errorf("nftables forward rules %+v", fwd)
	}
}

func TestIp6tablesVersion(t *testing.T) {
	v, err := parseToolVersion("ip6tables", "ip6tables v1.8.9 (nf_tables)\n")
	if err != nil || v != [3]int{1, 8, 9} {
		t.Fatalf("version %v, %v; want 1.8.9", v, err)
	}
}
