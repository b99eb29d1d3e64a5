package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/testenv"
)

// firewallLines returns h's iptables rules of the given chains (and the jumps to them,
// found by comment), in iptables-save's order, with the host's own subnet written as
// <subnet> and the daemon's names (chains, comment prefix) as X-… and "x …".
func firewallLines(c *cluster, h *host, subnet, prefix, comment string) []string {
	c.t.Helper()
	var out []string
	for _, l := range strings.Split(c.sh(h.ns, "iptables-save -t nat; iptables-save -t filter"), "\n") {
		if !strings.HasPrefix(l, "-A ") || !strings.Contains(l, prefix) && !strings.Contains(l, comment) {
			continue
		}
		l = strings.ReplaceAll(l, subnet, "<subnet>")
		l = strings.ReplaceAll(l, prefix, "X-")
		l = strings.ReplaceAll(l, `"`+comment+" ", `"x `)
		out = append(out, l)
	}
	return out
}

// TestFirewallRulesMatchFlanneld: given the same flags (--ip-masq, forward rules on by
// default) and config, weftd writes the rules the upstream flanneld writes, rule for
// rule and in the same places, but for the names of its chains and comments.
func TestFirewallRulesMatchFlanneld(t *testing.T) {
	for _, tc := range []struct {
		name   string
		flags  []string
		random bool
	}{
		{"ip-masq", []string{"--ip-masq"}, true},
		{"ip-masq without random-fully", []string{"--ip-masq", "--ip-masq-fully-random-disable"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, "v3")
			testenv.NeedTools(t, "iptables-save")
			c.putConfig(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":"vxlan"}}`)
			f, w := c.addHost("f", "lan1"), c.addHost("w", "lan1")
			c.startFlanneld(f, nil, tc.flags...)
			c.start(w, tc.flags...)
			fs, ws := c.waitSubnetEnv(f).Subnet.String(), c.waitSubnetEnv(w).Subnet.String()
			var flannel, weft []string
			eventually(t, 30*time.Second, func() error {
				flannel = firewallLines(c, f, fs, "FLANNEL-", "flanneld")
				weft = firewallLines(c, w, ws, "WEFT-", "weft")
				if len(flannel) != 10 || len(weft) != 10 {
					return fmt.Errorf("flanneld %d rules, weftd %d; want 10 each:\n%s\n\n%s",
						len(flannel), len(weft), strings.Join(flannel, "\n"), strings.Join(weft, "\n"))
				}
				return nil
			})
			for i := range flannel {
				if flannel[i] != weft[i] {
					t.Errorf("rule %d:\nflanneld %s\nweftd    %s", i, flannel[i], weft[i])
				}
			}
			if n := strings.Count(strings.Join(weft, "\n"), "--random-fully"); (n == 2) != tc.random || (n != 0 && n != 2) {
				t.Errorf("%d rules with --random-fully, want them on both MASQUERADE rules: %v", n, tc.random)
			}
			if t.Failed() {
				t.Logf("flanneld:\n%s\nweftd:\n%s", strings.Join(flannel, "\n"), strings.Join(weft, "\n"))
			}
		})
	}
}

var (
	nftCounterText = regexp.MustCompile(` counter packets \d+ bytes \d+`)
	nftCommentText = regexp.MustCompile(` comment "[^"]*"$`)
)

// nftChains returns the base chains of an nftables table on h by name: their type line
// and rules, counters and comments left out, the host's subnet written as <subnet>.
func nftChains(c *cluster, h *host, family, table, subnet string) map[string][]string {
	c.t.Helper()
	chains, cur := map[string][]string{}, ""
	// No table yet (the daemon is still starting) reads as no chains: callers await them.
	for _, l := range strings.Split(c.sh(h.ns, "nft list table "+family+" "+table+" 2>/dev/null || true"), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "chain "):
			cur = strings.TrimSuffix(strings.TrimPrefix(l, "chain "), " {")
		case cur == "" || l == "}" || l == "" || strings.HasPrefix(l, "comment "):
		default:
			l = nftCommentText.ReplaceAllString(nftCounterText.ReplaceAllString(l, ""), "")
			chains[cur] = append(chains[cur], strings.ReplaceAll(l, subnet, "<subnet>"))
		}
	}
	return chains
}

// TestNFTRulesMatchFlanneld: with EnableNFTables and --ip-masq, weftd's nftables chains
// are flanneld's (same hooks, priorities, rules in order), but for the two rules weft
// writes with the meaning of flanneld's iptables rules (docs/operations.md: Firewall rules).
func TestNFTRulesMatchFlanneld(t *testing.T) {
	c := newCluster(t, "v3")
	testenv.NeedTools(t, "nft")
	c.putConfig(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":"vxlan"},"EnableNFTables":true}`)
	f, w := c.addHost("f", "lan1"), c.addHost("w", "lan1")
	c.startFlanneld(f, nil, "--ip-masq")
	c.start(w, "--ip-masq")
	fs, ws := c.waitSubnetEnv(f).Subnet.String(), c.waitSubnetEnv(w).Subnet.String()
	var flannel, weft map[string][]string
	eventually(t, 30*time.Second, func() error {
		flannel = nftChains(c, f, "ip", "flannel-ipv4", fs)
		weft = nftChains(c, w, "ip", "weft", ws)
		if len(flannel["postrtg"]) != 7 || len(flannel["forward"]) != 3 || len(weft["postrtg"]) != 7 || len(weft["forward"]) != 3 {
			return fmt.Errorf("flanneld %q\nweftd %q", flannel, weft)
		}
		return nil
	})
	// Where weft differs on purpose: flanneld's rule, weft's.
	differ := map[string]string{
		"meta mark 0x00004000 return":                        "meta mark & 0x00004000 == 0x00004000 return",
		"ip saddr != <subnet> ip daddr 198.18.0.0/16 return": "ip saddr != 198.18.0.0/16 ip daddr <subnet> return",
	}
	for _, chain := range []string{"postrtg", "forward"} {
		for i, fl := range flannel[chain] {
			want := fl
			if d, ok := differ[fl]; ok {
				want = d
				delete(differ, fl)
			}
			if weft[chain][i] != want {
				t.Errorf("%s line %d:\nflanneld %s\nweftd    %s\nwant     %s", chain, i, fl, weft[chain][i], want)
			}
		}
	}
	if len(differ) != 0 {
		t.Errorf("flanneld's rules no longer hold %q: recheck weft's deviations", differ)
	}
	if t.Failed() {
		t.Logf("flanneld:\n%q\nweftd:\n%q", flannel, weft)
	}
}
