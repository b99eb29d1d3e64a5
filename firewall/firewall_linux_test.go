package firewall

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/bench/testenv"
)

// kinds are the two implementations, as New picks them.
var kinds = []struct {
	name string
	nft  bool
}{{"iptables", false}, {"nftables", true}}

// inNS runs f with the calling thread (and the commands it starts) in ns.
func inNS(t *testing.T, ns *netns.NS, f func() error) {
	t.Helper()
	if err := ns.Do(f); err != nil {
		t.Fatal(err)
	}
}

func sh(t *testing.T, ns *netns.NS, name string, args ...string) string {
	t.Helper()
	out, err := ns.Run(context.Background(), name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func needFirewallTools(t *testing.T) {
	if testing.Short() {
		t.Skip("needs root and network namespaces")
	}
	testenv.NeedRoot(t)
	testenv.NeedTools(t, "ip", "iptables", "iptables-restore", "nft")
}

// newFW makes the firewall of the given kind inside ns, as weftd does at start.
func newFW(t *testing.T, ns *netns.NS, nft, fullyRandom bool) Firewall {
	t.Helper()
	var fw Firewall
	inNS(t, ns, func() (err error) {
		fw, err = New(context.Background(), nft, Options{FullyRandom: fullyRandom, Log: zaptest.NewLogger(t)})
		return err
	})
	return fw
}

// ruleset is what a kind shows of weft's forward rules: iptables: the FORWARD and
// WEFT-FWD chains; nftables: weft's table.
func forwardView(t *testing.T, ns *netns.NS, nft bool) (jumps int, rules []string) {
	t.Helper()
	if nft {
		out, err := ns.Run(context.Background(), "nft", "list", "chain", "ip", NFTTable, nftFwdChain)
		if err != nil {
			return 0, nil
		}
		for _, l := range strings.Split(out, "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "ip ") {
				rules = append(rules, l)
			}
		}
		return strings.Count(out, "hook forward"), rules
	}
	for _, l := range strings.Split(sh(t, ns, "iptables", "-w", "5", "-S"), "\n") {
		switch {
		case strings.HasPrefix(l, "-A FORWARD") && strings.HasSuffix(l, "-j "+ForwardChain):
			jumps++
		case strings.HasPrefix(l, "-A FORWARD") && strings.Contains(l, "weft"):
			t.Errorf("a weft rule straight in FORWARD: %s", l)
		case strings.HasPrefix(l, "-A "+ForwardChain+" "):
			rules = append(rules, l)
		}
	}
	return jumps, rules
}

// TestForwardRules: the rules sit in weft's chain behind one jump from FORWARD (iptables)
// or in weft's table (nftables); a restart adds no duplicates; rules deleted by hand are
// put back by Repair; Remove leaves nothing, and nothing of the other kind is left.
func TestForwardRules(t *testing.T) {
	needFirewallTools(t)
	network := netip.MustParsePrefix("198.18.0.0/16")
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ns := netnstest.New(t, "fw")
			// Another tool's rules before ours, and a DROP policy, as Docker leaves them.
			sh(t, ns, "iptables", "-w", "5", "-P", "FORWARD", "DROP")
			sh(t, ns, "iptables", "-w", "5", "-A", "FORWARD", "-s", "192.0.2.0/24", "-j", "ACCEPT")
			// What older weftd appended straight to FORWARD goes.
			sh(t, ns, "iptables", "-w", "5", "-A", "FORWARD", "-s", "198.18.0.0/16", "-m", "comment", "--comment", fwdComment, "-j", "ACCEPT")

			fw := newFW(t, ns, k.nft, true)
			inNS(t, ns, func() error { return fw.SetForward(context.Background(), network) })
			jumps, rules := forwardView(t, ns, k.nft)
			if jumps != 1 || len(rules) != 2 {
				t.Fatalf("after start: %d jumps/base chains, rules %q; want 1 and 2", jumps, rules)
			}
			if !k.nft {
				out := sh(t, ns, "iptables", "-w", "5", "-S", "FORWARD")
				lines := strings.Split(strings.TrimSpace(out), "\n")
				if last := lines[len(lines)-1]; !strings.HasSuffix(last, "-j "+ForwardChain) {
					t.Fatalf("the jump is not the last rule of FORWARD:\n%s", out)
				}
				if !strings.Contains(out, "-A FORWARD -s 192.0.2.0/24 -j ACCEPT") {
					t.Fatalf("another tool's rule is gone:\n%s", out)
				}
			}
			var repaired bool
			inNS(t, ns, func() (err error) { repaired, err = fw.Repair(context.Background()); return err })
			if repaired {
				t.Fatal("Repair rewrote intact rules")
			}

			// A restart: a new instance writes again, over what is there.
			fw = newFW(t, ns, k.nft, true)
			inNS(t, ns, func() error { return fw.SetForward(context.Background(), network) })
			if j, r := forwardView(t, ns, k.nft); j != 1 || len(r) != 2 {
				t.Fatalf("after a restart: %d jumps/base chains, rules %q; want 1 and 2", j, r)
			}

			// Deleted by hand: Repair puts it back.
			if k.nft {
				sh(t, ns, "nft", "flush", "chain", "ip", NFTTable, nftFwdChain)
			} else {
				sh(t, ns, "iptables", "-w", "5", "-D", ForwardChain, "1")
				sh(t, ns, "iptables", "-w", "5", "-D", "FORWARD", "-m", "comment", "--comment", fwdComment, "-j", ForwardChain)
			}
			if j, r := forwardView(t, ns, k.nft); j == 1 && len(r) == 2 {
				t.Fatal("deleting by hand changed nothing")
			}
			inNS(t, ns, func() (err error) { repaired, err = fw.Repair(context.Background()); return err })
			if j, r := forwardView(t, ns, k.nft); !repaired || j != 1 || len(r) != 2 {
				t.Fatalf("after Repair (repaired %v): %d jumps/base chains, rules %q; want 1 and 2", repaired, j, r)
			}
			// Changed by hand (a rule replaced, or one slipped in): Repair rewrites it.
			if k.nft {
				sh(t, ns, "nft", "insert", "rule", "ip", NFTTable, nftFwdChain, "ip", "saddr", "198.18.0.0/16", "drop")
				sh(t, ns, "nft", "add", "chain", "ip", NFTTable, "slipped-in")
			} else {
				sh(t, ns, "iptables", "-w", "5", "-R", ForwardChain, "1", "-s", "198.18.0.0/16", "-j", "DROP")
			}
			inNS(t, ns, func() (err error) { repaired, err = fw.Repair(context.Background()); return err })
			if j, r := forwardView(t, ns, k.nft); !repaired || j != 1 || len(r) != 2 || strings.Contains(strings.Join(r, "\n"), "drop") {
				t.Fatalf("after a change by hand and Repair (repaired %v): %d jumps/base chains, rules %q", repaired, j, r)
			}
			if k.nft {
				if out := sh(t, ns, "nft", "list", "table", "ip", NFTTable); strings.Contains(out, "slipped-in") {
					t.Fatalf("a chain added by hand is still in weft's table:\n%s", out)
				}
			} else {
				if out := sh(t, ns, "iptables", "-w", "5", "-S", ForwardChain); strings.Contains(out, "DROP") {
					t.Fatalf("the changed rule is still there:\n%s", out)
				}
			}
			if k.nft {
				sh(t, ns, "nft", "delete", "table", "ip", NFTTable)
				inNS(t, ns, func() (err error) { repaired, err = fw.Repair(context.Background()); return err })
				if j, r := forwardView(t, ns, k.nft); !repaired || j != 1 || len(r) != 2 {
					t.Fatalf("table deleted, after Repair (repaired %v): %d base chains, rules %q", repaired, j, r)
				}
			}

			inNS(t, ns, func() error { return fw.Remove(context.Background()) })
			assertNothingLeft(t, ns)
			if out := sh(t, ns, "iptables", "-w", "5", "-S", "FORWARD"); !strings.Contains(out, "-P FORWARD DROP") ||
				!strings.Contains(out, "-A FORWARD -s 192.0.2.0/24 -j ACCEPT") {
				t.Fatalf("Remove touched what is not weft's:\n%s", out)
			}
			// Removing again is no error.
			inNS(t, ns, func() error { return fw.Remove(context.Background()) })
		})
	}
}

// assertNothingLeft fails when ns holds any chain, jump, rule or table of weft's.
func assertNothingLeft(t *testing.T, ns *netns.NS) {
	t.Helper()
	for _, table := range []string{"filter", "nat"} {
		if out := sh(t, ns, "iptables", "-w", "5", "-t", table, "-S"); strings.Contains(strings.ToLower(out), "weft") {
			t.Errorf("iptables %s table still holds weft's rules:\n%s", table, out)
		}
	}
	if out := sh(t, ns, "nft", "list", "tables"); strings.Contains(out, "ip "+NFTTable+"\n") {
		t.Errorf("nftables table %s is still there:\n%s", NFTTable, out)
	}
}

// TestSwitchKind: starting with the other kind removes what the first one wrote, as
// flanneld does when EnableNFTables is changed.
func TestSwitchKind(t *testing.T) {
	needFirewallTools(t)
	network, subnet := netip.MustParsePrefix("198.18.0.0/16"), netip.MustParsePrefix("198.18.7.0/24")
	for _, k := range kinds {
		t.Run("from "+k.name, func(t *testing.T) {
			ns := netnstest.New(t, "fw")
			first := newFW(t, ns, k.nft, false)
			inNS(t, ns, func() error {
				if err := first.SetMasq(context.Background(), network, subnet); err != nil {
					return err
				}
				return first.SetForward(context.Background(), network)
			})
			second := newFW(t, ns, !k.nft, false)
			assertNothingLeft(t, ns)
			inNS(t, ns, func() error { return second.Remove(context.Background()) })
		})
	}
}

// TestProbeRandomFully: this kernel and these tools support fully random ports, so the
// probe passes, leaves nothing behind, and the masquerade rules use it unless switched off.
func TestProbeRandomFully(t *testing.T) {
	needFirewallTools(t)
	network, subnet := netip.MustParsePrefix("198.18.0.0/16"), netip.MustParsePrefix("198.18.7.0/24")
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ns := netnstest.New(t, "fw")
			inNS(t, ns, func() error {
				if k.nft {
					f, err := NewNFTables(Options{})
					if err != nil {
						return err
					}
					return f.ProbeRandomFully(context.Background())
				}
				f, err := NewIPTables(Options{})
				if err != nil {
					return err
				}
				return f.ProbeRandomFully(context.Background())
			})
			assertNothingLeft(t, ns)
			if out := sh(t, ns, "iptables", "-w", "5", "-t", "nat", "-S"); strings.Contains(out, probeChain) {
				t.Fatalf("the probe chain is left:\n%s", out)
			}
			for _, random := range []bool{true, false} {
				fw := newFW(t, ns, k.nft, random)
				inNS(t, ns, func() error { return fw.SetMasq(context.Background(), network, subnet) })
				var out string
				if k.nft {
					out = sh(t, ns, "nft", "list", "table", "ip", NFTTable)
				} else {
					out = sh(t, ns, "iptables", "-w", "5", "-t", "nat", "-S", MasqChain)
				}
				word := map[bool]string{false: "--random-fully", true: "fully-random"}[k.nft]
				if n := strings.Count(out, word); (random && n != 2) || (!random && n != 0) {
					t.Fatalf("fully random %v: %d rules with %s, want %d:\n%s", random, n, word, map[bool]int{true: 2}[random], out)
				}
			}
		})
	}
}

// TestResync: the loop puts back rules deleted by hand, logs it, and returns when its
// context ends.
func TestResync(t *testing.T) {
	needFirewallTools(t)
	network, subnet := netip.MustParsePrefix("198.18.0.0/16"), netip.MustParsePrefix("198.18.7.0/24")
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ns := netnstest.New(t, "fw")
			fw := newFW(t, ns, k.nft, false)
			inNS(t, ns, func() error { return fw.SetMasq(context.Background(), network, subnet) })
			core, logs := observer.New(zap.WarnLevel)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				// The loop's commands must run in ns: it runs on a thread switched into it.
				done <- ns.Do(func() error { Resync(ctx, fw, 50*time.Millisecond, zap.New(core), nil); return nil })
			}()
			var stopped bool
			stop := func() error {
				if stopped {
					return nil
				}
				stopped = true
				cancel()
				select {
				case err := <-done:
					return err
				case <-time.After(10 * time.Second):
					return errors.New("Resync did not return after its context ended")
				}
			}
			t.Cleanup(func() { _ = stop() })
			if k.nft {
				sh(t, ns, "nft", "flush", "chain", "ip", NFTTable, nftMasqChain)
			} else {
				sh(t, ns, "iptables", "-w", "5", "-t", "nat", "-F", MasqChain)
			}
			deadline := time.Now().Add(10 * time.Second)
			for masqRuleCount(t, ns, k.nft) != 6 || logs.FilterMessageSnippet("changed behind our back").Len() == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the resync loop did not put the rules back and log it: %d rules, logs %v",
						masqRuleCount(t, ns, k.nft), logs.All())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			inNS(t, ns, func() error { return fw.Remove(context.Background()) })
		})
	}
}

func masqRuleCount(t *testing.T, ns *netns.NS, nft bool) int {
	t.Helper()
	if nft {
		return strings.Count(sh(t, ns, "nft", "list", "chain", "ip", NFTTable, nftMasqChain), "comment \"weft masq:")
	}
	return strings.Count(sh(t, ns, "iptables", "-w", "5", "-t", "nat", "-S", MasqChain), "-A "+MasqChain+" ")
}

// TestNFTWarnsAboutForwardDrop: in nftables mode an iptables FORWARD policy of DROP
// still drops overlay traffic (nftables runs every base chain of a hook); weft says so.
func TestNFTWarnsAboutForwardDrop(t *testing.T) {
	needFirewallTools(t)
	for _, policy := range []string{"ACCEPT", "DROP"} {
		t.Run(policy, func(t *testing.T) {
			ns := netnstest.New(t, "fw")
			sh(t, ns, "iptables", "-w", "5", "-P", "FORWARD", policy)
			core, logs := observer.New(zap.WarnLevel)
			inNS(t, ns, func() error {
				fw, err := New(context.Background(), true, Options{Log: zap.New(core)})
				if err != nil {
					return err
				}
				return fw.Remove(context.Background())
			})
			if n := logs.FilterMessageSnippet("FORWARD policy is DROP").Len(); (n > 0) != (policy == "DROP") {
				t.Fatalf("policy %s: %d warnings, logs %v", policy, n, logs.All())
			}
		})
	}
}
