package firewall

import (
	"net/netip"
	"strings"
)

// Table and chains of the nftables implementation.
const (
	NFTTable      = "weft"    // family ip, and ip6 for IPv6
	nftMasqChain  = "postrtg" // nat, hook postrouting, priority srcnat
	nftFwdChain   = "forward" // filter, hook forward, priority filter
	nftProbeChain = "probe"   // checked, never committed
)

// nftRule is one rule of a chain: its text and the comment that says what it is for.
type nftRule struct{ rule, comment string }

// nftMasqRules are the rules of the postrtg chain, with the meaning of masqRules.
// The kube-proxy mark is tested under its mask, as iptables' --mark 0x4000/0x4000 does.
func nftMasqRules(network, subnet netip.Prefix, fullyRandom bool) []nftRule {
	n, s := network.String(), subnet.String()
	ip := nftProto(network)
	masq := "masquerade"
	if fullyRandom {
		masq = "masquerade fully-random"
	}
	return []nftRule{
		{"meta mark & 0x4000 == 0x4000 counter return", "weft masq: marked by kube-proxy"},
		{join(ip, "saddr", s, ip, "daddr", n, "counter return"), "weft masq: our pods to pods"},
		{join(ip, "saddr", n, ip, "daddr", s, "counter return"), "weft masq: pods to our pods"},
		{join(ip, "saddr !=", n, ip, "daddr", s, "counter return"), "weft masq: outside to our pods"},
		{join(ip, "saddr", n, ip, "daddr !=", multicastOf(network), "counter", masq), "weft masq: pods to outside"},
		{join(ip, "saddr !=", n, ip, "daddr", n, "counter", masq), "weft masq: host to pods"},
	}
}

// nftForwardRules are the rules of the forward chain.
func nftForwardRules(network netip.Prefix) []nftRule {
	n, ip := network.String(), nftProto(network)
	return []nftRule{
		{join(ip, "saddr", n, "counter accept"), "weft forward: from pods"},
		{join(ip, "daddr", n, "counter accept"), "weft forward: to pods"},
	}
}

// nftProto is the nft keyword of network's family: ip or ip6.
func nftProto(network netip.Prefix) string {
	if network.Addr().Is6() {
		return "ip6"
	}
	return "ip"
}

func join(words ...string) string { return strings.Join(words, " ") }
