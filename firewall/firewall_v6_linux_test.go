package firewall

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
)

// masqView6 is what a kind shows of weft's IPv6 masquerade rules.
func masqView6(t *testing.T, ns *netns.NS, nft bool) string {
	t.Helper()
	if nft {
		out, _ := ns.Run(context.Background(), "nft", "list", "table", "ip6", NFTTable)
		return out
	}
	out, _ := ns.Run(context.Background(), "ip6tables", "-w", "5", "-t", "nat", "-S")
	return out
}

// TestFirewallV6: on a dual-stack network each kind writes the IPv6 rules beside the
// IPv4 ones (ip6tables chains WEFT-POSTRTG/WEFT-FWD with their jumps, or table ip6
// weft), Repair puts back a deleted IPv6 rule, TakeOver removes flanneld's IPv6
// chains and its ip6 flannel-ipv6 table, and RemoveAll (weftd cleanup) leaves nothing
// of weft's in either family.
func TestFirewallV6(t *testing.T) {
	needFirewallTools(t)
	testenv.NeedTools(t, "ip6tables", "ip6tables-restore", "ip6tables-save", "iptables-save")
	ctx := context.Background()
	net4, sub4 := netip.MustParsePrefix("198.18.0.0/16"), netip.MustParsePrefix("198.18.7.0/24")
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ns := netnstest.New(t, "fw6")
			// What flanneld v0.28 leaves with IPv6: the same chains in ip6tables, and
			// its ip6 table.
			sh(t, ns, "ip6tables", "-w", "5", "-t", "nat", "-N", "FLANNEL-POSTRTG")
			sh(t, ns, "ip6tables", "-w", "5", "-t", "nat", "-A", "POSTROUTING", "-m", "comment", "--comment", "flanneld masq", "-j", "FLANNEL-POSTRTG")
			sh(t, ns, "nft", "add table ip6 flannel-ipv6")

			fw := newFW(t, ns, k.nft, false)
			inNS(t, ns, func() error {
				for _, err := range []error{
					fw.SetForward(ctx, net4), fw.SetForward(ctx, testNetwork6),
					fw.SetMasq(ctx, net4, sub4), fw.SetMasq(ctx, testNetwork6, testSubnet6),
					TakeOver(ctx, Options{Log: zaptest.NewLogger(t)}),
				} {
					if err != nil {
						return err
					}
				}
				return nil
			})
			v6 := masqView6(t, ns, k.nft)
			want := []string{"-A WEFT-POSTRTG -s fd00:1::/48 ! -d ff00::/8", "-A POSTROUTING -m comment --comment \"weft masq\" -j WEFT-POSTRTG"}
			if k.nft {
				want = []string{"ip6 saddr fd00:1::/48 ip6 daddr != ff00::/8 counter", "hook postrouting", "ip6 daddr fd00:1::/48 counter"}
			}
			for _, w := range want {
				if !strings.Contains(v6, w) {
					t.Fatalf("IPv6 rules lack %q:\n%s", w, v6)
				}
			}
			if strings.Contains(v6, "198.18.") {
				t.Fatalf("IPv4 addresses in the IPv6 rules:\n%s", v6)
			}
			if !k.nft {
				if fwd := sh(t, ns, "ip6tables", "-w", "5", "-S"); !strings.Contains(fwd, "-A WEFT-FWD -s fd00:1::/48") || !strings.HasSuffix(strings.TrimSpace(sh(t, ns, "ip6tables", "-w", "5", "-S", "FORWARD")), "-j "+ForwardChain) {
					t.Fatalf("ip6tables forward rules:\n%s", fwd)
				}
			}
			v4 := sh(t, ns, "iptables-save")
			if k.nft {
				v4 = sh(t, ns, "nft", "list", "table", "ip", NFTTable)
			}
			if !strings.Contains(v4, "198.18.7.0/24") || !strings.Contains(v4, "224.0.0.0/4") {
				t.Fatalf("IPv4 rules missing beside the IPv6 ones:\n%s", v4)
			}
			all6 := sh(t, ns, "ip6tables-save") + sh(t, ns, "nft", "list", "tables")
			if strings.Contains(all6, "FLANNEL") || strings.Contains(all6, "flannel-ipv6") {
				t.Fatalf("TakeOver left flanneld's IPv6 rules:\n%s", all6)
			}

			// Someone deletes an IPv6 rule: Repair puts it back.
			if k.nft {
				sh(t, ns, "nft", "flush", "chain", "ip6", NFTTable, nftMasqChain)
			} else {
				sh(t, ns, "ip6tables", "-w", "5", "-t", "nat", "-D", MasqChain, "5")
			}
			var repaired bool
			inNS(t, ns, func() (err error) { repaired, err = fw.Repair(ctx); return err })
			if now := masqView6(t, ns, k.nft); !repaired || now != v6 {
				t.Fatalf("repaired %v; IPv6 rules now:\n%s\nwant:\n%s", repaired, now, v6)
			}

			inNS(t, ns, func() error { return RemoveAll(ctx, Options{Log: zaptest.NewLogger(t)}) })
			left := sh(t, ns, "ip6tables-save") + sh(t, ns, "iptables-save") + sh(t, ns, "nft", "list", "ruleset")
			if strings.Contains(left, "WEFT") || strings.Contains(left, "weft") {
				t.Fatalf("RemoveAll left weft's rules:\n%s", left)
			}
		})
	}
}

// TestMasqV6Traffic: a pod's IPv6 packets to a host outside the network leave with the
// host's address once the IPv6 masquerade rules are in (the outside host, the lab's
// other host, has no route back to the pod network, so only a masqueraded ping is
// answered), and no longer after Remove; with each kind.
func TestMasqV6Traffic(t *testing.T) {
	needFirewallTools(t)
	testenv.NeedTools(t, "ping")
	ctx := context.Background()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			l := labtest.New(t, lab.Spec{Prefix: "fw6", NoRouter: true, Hosts: []lab.HostSpec{{Name: "h"}, {Name: "o"}}})
			h, out := l.Hosts()[0], l.Hosts()[1]
			for _, x := range []*lab.Host{h, out} {
				if err := l.EnableIPv6(ctx, x); err != nil {
					t.Fatal(err)
				}
			}
			p, err := l.AttachPod(ctx, h, lease.SubnetEnv{IPv6Network: testNetwork6, IPv6Subnet: testSubnet6})
			if err != nil {
				t.Fatal(err)
			}
			host, pod, outside := h.NS, p.NS, lab.HostAddr6(out).String()
			ping := func() error {
				_, err := pod.Run(ctx, "ping", "-c", "1", "-W", "1", outside)
				return err
			}
			if ping() == nil {
				t.Fatal("the outside host answered an unmasqueraded pod: the test cannot tell")
			}
			fw := newFW(t, host, k.nft, true)
			inNS(t, host, func() error { return fw.SetMasq(ctx, testNetwork6, testSubnet6) })
			testenv.Eventually(t, 5*time.Second, ping)
			inNS(t, host, func() error { return fw.Remove(ctx) })
			// A new ping is a new ICMP flow (another ID): no conntrack entry of the
			// masqueraded one applies.
			if ping() == nil {
				t.Fatal("the pod's pings are still masqueraded after Remove")
			}
		})
	}
}
