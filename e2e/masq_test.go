package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// masqCounters returns the packet counter of each rule of WEFT-POSTRTG on h, in order.
func masqCounters(c *cluster, h *host) []int {
	c.t.Helper()
	out := c.sh(h.ns, "iptables -w 5 -t nat -L WEFT-POSTRTG -n -v -x")
	var n []int
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

// TestIPMasq: with --ip-masq a pod reaches an address outside the overlay that has no
// route back to it (the router), pod-to-pod traffic keeps its source, the rules are
// repaired when deleted by hand, and a restart adds no duplicates.
func TestIPMasq(t *testing.T) {
	c := newCluster(t, "v3")
	c.putConfig(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":"udp"}}`)
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

	// The router knows no route to the overlay: only masqueraded pods get answers.
	c.ping(hosts["a"].pod, "192.0.2.1")
	c.ping(hosts["c"].pod, "198.51.100.1")
	if out, err := hosts["b"].pod.Run(context.Background(), "ping", "-c", "2", "-W", "1", "192.0.2.1"); err == nil {
		t.Fatalf("pod b reached the router without --ip-masq on its host:\n%s", out)
	}

	// Pod to pod is not masqueraded: it meets the RETURN for our subnet -> network.
	a := hosts["a"]
	before := masqCounters(c, a)
	c.ping(a.pod, pods["c"])
	after := masqCounters(c, a)
	if after[1] <= before[1] || after[4] != before[4] {
		t.Fatalf("pod a -> pod c: counters %v -> %v, want rule 2 (RETURN) up and rule 5 (MASQUERADE) unchanged", before, after)
	}

	// A rule deleted by hand is back within the resync period (5 s).
	c.sh(a.ns, "iptables -w 5 -t nat -D WEFT-POSTRTG 5")
	eventually(t, 20*time.Second, func() error {
		out, _ := a.ns.Run(context.Background(), "iptables", "-w", "5", "-t", "nat", "-S", "WEFT-POSTRTG")
		if n := strings.Count(out, "-A WEFT-POSTRTG"); n != 6 {
			return fmt.Errorf("%d rules:\n%s", n, out)
		}
		return nil
	})
	if !strings.Contains(a.logs(), "masquerade rules changed behind our back") {
		t.Fatalf("weftd on a did not report the repair:\n%s", a.logs())
	}

	// A restart rewrites the chain and keeps one jump to it.
	c.stop(a)
	c.start(a, "--ip-masq")
	eventually(t, 20*time.Second, func() error { return healthy(a) })
	out := c.sh(a.ns, "iptables -w 5 -t nat -S POSTROUTING")
	if n := strings.Count(out, "-j WEFT-POSTRTG"); n != 1 {
		t.Fatalf("%d jumps to WEFT-POSTRTG after a restart:\n%s", n, out)
	}
	masqCounters(c, a)
	c.ping(a.pod, "192.0.2.1")
}
