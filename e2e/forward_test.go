package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/testenv"
)

// forwardView returns h's FORWARD chain and weft's WEFT-FWD chain as iptables -S
// prints them, and how many rules WEFT-FWD holds.
func forwardView(h *host) (fwd, chain string, n int) {
	fwd, _ = h.ns.Run(context.Background(), "iptables", "-w", "5", "-S", "FORWARD")
	chain, _ = h.ns.Run(context.Background(), "iptables", "-w", "5", "-S", "WEFT-FWD")
	return fwd, chain, strings.Count(chain, "-A WEFT-FWD ")
}

// checkForward fails unless h's FORWARD chain ends in one jump to WEFT-FWD, holds no
// weft rule of its own, and WEFT-FWD accepts from and to the network.
func checkForward(h *host) error {
	fwd, chain, n := forwardView(h)
	lines := strings.Split(strings.TrimSpace(fwd), "\n")
	switch {
	case strings.Count(fwd, "-j WEFT-FWD") != 1:
		return fmt.Errorf("%d jumps to WEFT-FWD:\n%s", strings.Count(fwd, "-j WEFT-FWD"), fwd)
	case !strings.HasSuffix(lines[len(lines)-1], "-j WEFT-FWD"):
		return fmt.Errorf("the jump is not FORWARD's last rule:\n%s", fwd)
	case strings.Count(fwd, "weft") != 1:
		return fmt.Errorf("weft's rules straight in FORWARD:\n%s", fwd)
	case n != 2 || !strings.Contains(chain, "-s 198.18.0.0/16") || !strings.Contains(chain, "-d 198.18.0.0/16"):
		return fmt.Errorf("WEFT-FWD:\n%s", chain)
	}
	return nil
}

// TestForwardRules: on hosts whose FORWARD policy is DROP (as Docker sets it), weft's
// forward rules let overlay traffic pass (a host started without them drops it); the
// rules sit in WEFT-FWD behind one jump at the end of FORWARD, after the host's own
// rules; rules deleted by hand come back; a restart adds no duplicates; a stop keeps them and weftd cleanup removes
// them and leaves the policy and the other rules alone.
func TestForwardRules(t *testing.T) {
	c := newCluster(t, "v3")
	testenv.NeedTools(t, "iptables", "iptables-save")
	c.putConfig(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":"udp"}}`)
	hosts := map[string]*host{"a": c.addHost("a", "lan1"), "b": c.addHost("b", "lan1"), "c": c.addHost("c", "lan2")}
	for _, h := range hosts {
		c.sh(h.ns, "iptables -w 5 -P FORWARD DROP && iptables -w 5 -A FORWARD -s 192.0.2.0/24 -d 198.51.100.0/24 -j ACCEPT")
	}
	c.start(hosts["a"], "--iptables-resync=1")
	c.start(hosts["b"], "--iptables-forward-rules=false")
	c.start(hosts["c"])
	pods := map[string]string{}
	for name, h := range hosts {
		pods[name] = c.attachPod(h, c.waitSubnetEnv(h))
	}
	meshPing(c, hosts, pods, "a", "c")
	// The DROP policy is in force: b, without forward rules, does not pass its pod's traffic.
	if out, err := hosts["a"].pod.Run(context.Background(), "ping", "-c", "2", "-W", "1", pods["b"]); err == nil {
		t.Fatalf("pod a reached pod b through a host without forward rules and a DROP policy:\n%s", out)
	}
	a := hosts["a"]
	if err := checkForward(a); err != nil {
		t.Fatal(err)
	}
	if out := c.sh(hosts["b"].ns, "iptables-save"); strings.Contains(out, "WEFT") {
		t.Fatalf("b has forward rules with --iptables-forward-rules=false:\n%s", out)
	}

	// Deleted by hand, the rules and the jump come back.
	for _, del := range []string{
		"iptables -w 5 -F WEFT-FWD",
		`iptables -w 5 -D FORWARD -m comment --comment "weft forward" -j WEFT-FWD`,
		"iptables -w 5 -D WEFT-FWD 2",
	} {
		// With a 1 s resync weftd may put the rules back before a second look at
		// them: its repair counter, not a race with it, shows the deletion took.
		before, _ := mustScrape(t, a).value("weft_firewall_repairs_total", "firewall", "iptables")
		c.sh(a.ns, del)
		eventually(t, 20*time.Second, func() error {
			if err := checkForward(a); err != nil {
				return err
			}
			s, err := scrapeMetrics(a)
			if err != nil {
				return err
			}
			if v, _ := s.value("weft_firewall_repairs_total", "firewall", "iptables"); v <= before {
				return fmt.Errorf("after %s: weft_firewall_repairs_total still %v", del, v)
			}
			return nil
		})
	}
	c.ping(a.pod, pods["c"])

	// A restart, after a stop and after a crash that left the rules in place: one
	// jump, two rules, traffic passes.
	for _, crash := range []bool{false, true} {
		if crash {
			if err := a.daemon.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := checkForward(a); err != nil {
				t.Fatalf("a killed weftd took its rules along: %v", err)
			}
		} else {
			c.stop(a)
		}
		c.start(a, "--iptables-resync=1")
		eventually(t, 20*time.Second, func() error { return healthy(a) })
		if err := checkForward(a); err != nil {
			t.Fatalf("after a restart (crash %v): %v", crash, err)
		}
		c.ping(a.pod, pods["c"])
	}

	// A stop keeps the rules (the kernel may go on forwarding); weftd cleanup removes
	// weft's chain and jump, and nothing else.
	c.stop(a)
	if err := checkForward(a); err != nil {
		t.Fatalf("after a stop: %v", err)
	}
	c.cleanup(a)
	out := c.sh(a.ns, "iptables-save -t filter")
	if strings.Contains(out, "WEFT") || strings.Contains(out, "weft") {
		t.Fatalf("after weftd cleanup:\n%s", out)
	}
	if !strings.Contains(out, ":FORWARD DROP") || !strings.Contains(out, "-A FORWARD -s 192.0.2.0/24 -d 198.51.100.0/24 -j ACCEPT") {
		t.Fatalf("weftd cleanup changed the host's own FORWARD setup:\n%s", out)
	}
}
