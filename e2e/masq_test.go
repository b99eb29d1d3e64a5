package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/testenv"
)

// fwModes are the two ways weftd writes its rules: iptables chains, or (EnableNFTables
// in the network config) an nftables table of its own.
var fwModes = []struct {
	name string
	nft  bool
}{{"iptables", false}, {"nftables", true}}

var nftCounter = regexp.MustCompile(`counter packets (\d+) `)

// masqCounters returns the packet counter of each of weft's masquerade rules on h, in
// order: the rules of WEFT-POSTRTG, or of chain postrtg in nftables table ip weft.
func masqCounters(c *cluster, h *host, nft bool) []int {
	c.t.Helper()
	var n []int
	if nft {
		out := c.sh(h.ns, "nft list chain ip weft postrtg")
		for _, m := range nftCounter.FindAllStringSubmatch(out, -1) {
			v, _ := strconv.Atoi(m[1])
			n = append(n, v)
		}
		if len(n) != 6 {
			c.t.Fatalf("nftables chain postrtg on %s has %d rules, want 6:\n%s", h.name, len(n), out)
		}
		return n
	}
	out := c.sh(h.ns, "iptables -w 5 -t nat -L WEFT-POSTRTG -n -v -x")
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || (f[2] != "RETURN" && f[2] != "MASQUERADE") {
			continue
		}
		v, err := strconv.Atoi(f[0])
		if err != nil {
			c.t.Fatalf("iptables counters: %q", l)
		}
		n = append(n, v)
	}
	if len(n) != 6 {
		c.t.Fatalf("WEFT-POSTRTG on %s has %d rules, want 6:\n%s", h.name, len(n), out)
	}
	return n
}

// masqRuleCount counts weft's masquerade rules on h.
func masqRuleCount(h *host, nft bool) (int, string) {
	if nft {
		out, _ := h.ns.Run(context.Background(), "nft", "list", "chain", "ip", "weft", "postrtg")
		return len(nftCounter.FindAllString(out, -1)), out
	}
	out, _ := h.ns.Run(context.Background(), "iptables", "-w", "5", "-t", "nat", "-S", "WEFT-POSTRTG")
	return strings.Count(out, "-A WEFT-POSTRTG"), out
}

// deleteMasqRule deletes weft's i-th masquerade rule (from 1) on h by hand.
func deleteMasqRule(c *cluster, h *host, nft bool, i int) {
	c.t.Helper()
	if !nft {
		c.sh(h.ns, fmt.Sprintf("iptables -w 5 -t nat -D WEFT-POSTRTG %d", i))
		return
	}
	var handles []string
	for _, l := range strings.Split(c.sh(h.ns, "nft -a list chain ip weft postrtg"), "\n") {
		if f := strings.Fields(l); strings.Contains(l, "counter") && len(f) > 2 && f[len(f)-2] == "handle" {
			handles = append(handles, f[len(f)-1])
		}
	}
	if len(handles) < i {
		c.t.Fatalf("postrtg has %d rules, cannot delete rule %d", len(handles), i)
	}
	c.sh(h.ns, "nft delete rule ip weft postrtg handle "+handles[i-1])
}

// weftRules returns what h's firewall holds of weft's: lines of iptables-save naming
// WEFT chains or weft comments, and whether nftables has table ip weft.
func weftRules(c *cluster, h *host) (iptables []string, nftTable bool) {
	c.t.Helper()
	for _, l := range strings.Split(c.sh(h.ns, "iptables-save"), "\n") {
		if strings.Contains(strings.ToLower(l), "weft") {
			iptables = append(iptables, l)
		}
	}
	return iptables, strings.Contains(c.sh(h.ns, "nft list tables"), "table ip weft\n")
}

// TestIPMasq: with --ip-masq a pod reaches an address outside the overlay that has no
// route back to it (the router), pod-to-pod traffic keeps its source, the rules are
// repaired when deleted by hand, a restart adds no duplicates, a stop keeps them and weftd cleanup removes them;
// the same with iptables and with EnableNFTables, each mode writing only its own rules.
func TestIPMasq(t *testing.T) {
	for _, mode := range fwModes {
		t.Run(mode.name, func(t *testing.T) {
			testIPMasq(t, mode.nft)
		})
	}
}

func testIPMasq(t *testing.T, nft bool) {
	c := newCluster(t, "v3")
	testenv.NeedTools(t, "iptables", "iptables-save", "nft")
	c.putConfig(fmt.Sprintf(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":"udp"},"EnableNFTables":%v}`, nft))
	hosts := map[string]*host{"a": c.addHost("a", "lan1"), "b": c.addHost("b", "lan1"), "c": c.addHost("c", "lan2")}
	c.start(hosts["a"], "--ip-masq")
	c.start(hosts["b"])
	c.start(hosts["c"], "--ip-masq")
	pods := map[string]string{}
	for name, h := range hosts {
		env := c.waitSubnetEnv(h)
		if env.IPMasq != (name != "b") {
			t.Fatalf("%s: FLANNEL_IPMASQ=%v", name, env.IPMasq)
		}
		pods[name] = c.attachPod(h, env)
	}
	meshPing(c, hosts, pods, "a", "b", "c")

	// Each mode writes its own rules only.
	a := hosts["a"]
	ipt, table := weftRules(c, a)
	if nft && (len(ipt) > 0 || !table) {
		t.Fatalf("EnableNFTables: iptables rules %q, nftables table %v; want none and the table", ipt, table)
	}
	if !nft && (len(ipt) == 0 || table) {
		t.Fatalf("iptables mode: iptables rules %q, nftables table %v; want rules and no table", ipt, table)
	}

	// The router knows no route to the overlay: only masqueraded pods get answers.
	c.ping(hosts["a"].pod, "192.0.2.1")
	c.ping(hosts["c"].pod, "198.51.100.1")
	if out, err := hosts["b"].pod.Run(context.Background(), "ping", "-c", "2", "-W", "1", "192.0.2.1"); err == nil {
		t.Fatalf("pod b reached the router without --ip-masq on its host:\n%s", out)
	}

	// Pod to pod is not masqueraded: it meets the RETURN for our subnet -> network.
	before := masqCounters(c, a, nft)
	c.ping(a.pod, pods["c"])
	after := masqCounters(c, a, nft)
	if after[1] <= before[1] || after[4] != before[4] {
		t.Fatalf("pod a -> pod c: counters %v -> %v, want rule 2 (RETURN) up and rule 5 (MASQUERADE) unchanged", before, after)
	}
	// Pod to outside is: it meets rule 5.
	before = after
	if out, err := a.pod.Run(context.Background(), "ping", "-c", "1", "-W", "1", "192.0.2.1"); err != nil {
		t.Fatalf("pod a -> router: %v\n%s", err, out)
	}
	if after = masqCounters(c, a, nft); after[4] <= before[4] {
		t.Fatalf("pod a -> router: counters %v -> %v, want rule 5 (MASQUERADE) up", before, after)
	}

	// The host into the overlay from an address outside it is: rule 6.
	before = after
	if out, err := a.ns.Run(context.Background(), "ping", "-c", "1", "-W", "1", "-I", a.ip, pods["c"]); err != nil {
		t.Fatalf("host a (from %s) -> pod c: %v\n%s", a.ip, err, out)
	}
	if after = masqCounters(c, a, nft); after[5] <= before[5] || after[4] != before[4] {
		t.Fatalf("host a -> pod c: counters %v -> %v, want rule 6 (MASQUERADE) up and rule 5 unchanged", before, after)
	}

	// A rule deleted by hand is back within the resync period (5 s).
	deleteMasqRule(c, a, nft, 5)
	if n, out := masqRuleCount(a, nft); n != 5 {
		t.Fatalf("after deleting one rule by hand: %d rules:\n%s", n, out)
	}
	eventually(t, 20*time.Second, func() error {
		if n, out := masqRuleCount(a, nft); n != 6 {
			return fmt.Errorf("%d rules:\n%s", n, out)
		}
		if !strings.Contains(a.logs(), "firewall rules changed behind our back") {
			return fmt.Errorf("weftd on a did not report the repair:\n%s", a.logs())
		}
		return nil
	})

	// A restart rewrites the rules and keeps one jump to them (one table).
	c.stop(a)
	c.start(a, "--ip-masq")
	eventually(t, 20*time.Second, func() error { return healthy(a) })
	if nft {
		if out := c.sh(a.ns, "nft list tables"); strings.Count(out, "table ip weft\n") != 1 {
			t.Fatalf("tables after a restart:\n%s", out)
		}
	} else if out := c.sh(a.ns, "iptables -w 5 -t nat -S POSTROUTING"); strings.Count(out, "-j WEFT-POSTRTG") != 1 {
		t.Fatalf("%d jumps to WEFT-POSTRTG after a restart:\n%s", strings.Count(out, "-j WEFT-POSTRTG"), out)
	}
	masqCounters(c, a, nft)
	c.ping(a.pod, "192.0.2.1")

	// A stop keeps the rules; weftd cleanup removes everything weft wrote.
	c.stop(a)
	if ipt, table := weftRules(c, a); len(ipt) == 0 && !table {
		t.Fatalf("a stop took weft's rules along")
	}
	c.cleanup(a)
	if ipt, table := weftRules(c, a); len(ipt) > 0 || table {
		t.Fatalf("after weftd cleanup: iptables rules %q, nftables table %v; want none", ipt, table)
	}
}

// TestNFTCoexistsWithIptables: with EnableNFTables, weft's table works beside another
// tool's iptables rules (kube-proxy-like nat and filter chains) on the same host: the
// traffic is masqueraded as it should be, the other rules stay as they were, weftd cleanup removes weft's.
func TestNFTCoexistsWithIptables(t *testing.T) {
	c := newCluster(t, "v3")
	testenv.NeedTools(t, "iptables", "iptables-save", "nft")
	c.putConfig(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":"vxlan"},"EnableNFTables":true}`)
	hosts := map[string]*host{"a": c.addHost("a", "lan1"), "c": c.addHost("c", "lan2")}
	other := "iptables -w 5 -t nat -N OTHER-POSTRTG && iptables -w 5 -t nat -A POSTROUTING -j OTHER-POSTRTG && " +
		"iptables -w 5 -t nat -A OTHER-POSTRTG -m mark --mark 0x4000/0x4000 -j MASQUERADE && " +
		"iptables -w 5 -N OTHER-FWD && iptables -w 5 -A FORWARD -j OTHER-FWD && " +
		"iptables -w 5 -A OTHER-FWD -m mark --mark 0x4000/0x4000 -j ACCEPT"
	c.sh(hosts["a"].ns, other)
	want := c.sh(hosts["a"].ns, "iptables -w 5 -S; iptables -w 5 -t nat -S")
	for _, h := range hosts {
		c.start(h, "--ip-masq")
	}
	pods := map[string]string{}
	for name, h := range hosts {
		pods[name] = c.attachPod(h, c.waitSubnetEnv(h))
	}
	a := hosts["a"]
	if got := c.sh(a.ns, "iptables -w 5 -S; iptables -w 5 -t nat -S"); got != want {
		t.Fatalf("the other tool's iptables rules changed:\n%s\nwant:\n%s", got, want)
	}
	if out := c.sh(a.ns, "nft list table ip weft"); !strings.Contains(out, "hook postrouting") || !strings.Contains(out, "hook forward") {
		t.Fatalf("table ip weft lacks its chains:\n%s", out)
	}

	meshPing(c, hosts, pods, "a", "c")
	before := masqCounters(c, a, true)
	c.ping(a.pod, pods["c"])
	after := masqCounters(c, a, true)
	if after[1] <= before[1] || after[4] != before[4] {
		t.Fatalf("pod a -> pod c: counters %v -> %v, want rule 2 (RETURN) up and rule 5 (MASQUERADE) unchanged", before, after)
	}
	c.ping(a.pod, "192.0.2.1")
	c.ping(hosts["c"].pod, "198.51.100.1")

	c.stop(a)
	c.cleanup(a)
	if got := c.sh(a.ns, "iptables -w 5 -S; iptables -w 5 -t nat -S"); got != want {
		t.Fatalf("after weftd cleanup, the other tool's iptables rules changed:\n%s\nwant:\n%s", got, want)
	}
	if ipt, table := weftRules(c, a); len(ipt) > 0 || table {
		t.Fatalf("after weftd cleanup: iptables rules %q, nftables table %v; want none", ipt, table)
	}
}
