package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// routeTo returns the kernel's route for dst on h ("" when there is none).
func routeTo(c *cluster, h *host, dst string) string {
	c.t.Helper()
	out, _ := h.ns.Run(context.Background(), "ip", "-4", "route", "show", dst)
	return strings.TrimSpace(out)
}

func countLines(s string) int {
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n
}

// vtepMAC is the VtepMAC weftd on h published in etcd.
func vtepMAC(c *cluster, h *host) string {
	c.t.Helper()
	for _, l := range c.leases() {
		if l.attrs.PublicIP.String() == h.ip {
			var d struct{ VtepMAC string }
			if err := json.Unmarshal(l.attrs.BackendData, &d); err != nil || d.VtepMAC == "" {
				c.t.Fatalf("BackendData %s of %s: %v", l.attrs.BackendData, h.name, err)
			}
			return d.VtepMAC
		}
	}
	c.t.Fatalf("no lease for %s", h.name)
	return ""
}

// TestVXLANBackend: vxlan carries pod traffic across all pairs, the router included;
// entries deleted by hand come back; a restart keeps VtepMAC and subnet and leaves no
// duplicates.
func TestVXLANBackend(t *testing.T) {
	c, hosts, pods := podCluster(t, "vxlan", map[string]string{"a": "lan1", "b": "lan1", "c": "lan2"})
	meshPing(c, hosts, pods, "a", "b", "c")
	t.Logf("vxlan backend, pod a -> pod c across the router: %.2f Gbit/s", iperfTCP(t, hosts["a"].pod, hosts["c"].pod, pods["c"], 2)/1e9)

	a := hosts["a"]
	envC := c.waitSubnetEnv(hosts["c"])
	subnetC := envC.Subnet.String()
	if r := routeTo(c, a, subnetC); !strings.Contains(r, "dev flannel.1") || !strings.Contains(r, "onlink") {
		t.Fatalf("route to c on a: %q", r)
	}

	// Deleted by hand: route, neighbour and fdb entry come back within the reconcile period.
	macC := vtepMAC(c, hosts["c"])
	gwC := envC.Subnet.Addr().String()
	repairsBefore := mustScrape(t, a)
	c.sh(a.ns, "ip route del "+subnetC)
	c.sh(a.ns, "ip neigh del "+gwC+" dev flannel.1")
	c.sh(a.ns, "bridge fdb del "+macC+" dev flannel.1")
	eventually(t, 25*time.Second, func() error {
		if r := routeTo(c, a, subnetC); !strings.Contains(r, "flannel.1") {
			return fmt.Errorf("route to %s not back", subnetC)
		}
		if out, _ := a.ns.Run(context.Background(), "ip", "neigh", "show", gwC, "dev", "flannel.1"); !strings.Contains(out, macC) {
			return fmt.Errorf("neighbour %s not back: %q", gwC, out)
		}
		if out, _ := a.ns.Run(context.Background(), "bridge", "fdb", "show", "dev", "flannel.1"); !strings.Contains(out, macC) {
			return fmt.Errorf("fdb entry %s not back: %q", macC, out)
		}
		return nil
	})
	c.ping(a.pod, pods["c"])
	// /metrics counted each repair (new peers' first entries are not repairs).
	repairsAfter := mustScrape(t, a)
	for _, object := range []string{"route", "neigh", "fdb"} {
		rose(t, "a", repairsBefore, repairsAfter, 1, "weft_reconcile_repairs_total", "backend", "vxlan", "object", object)
	}
	if d := repairsAfter.must(t, "weft_reconcile_repairs_total", "object", "device") - repairsBefore.must(t, "weft_reconcile_repairs_total", "object", "device"); d != 0 {
		t.Errorf("weft_reconcile_repairs_total{object=device} rose by %v; nobody deleted the device", d)
	}

	// A restart keeps VtepMAC and subnet; stopping all and starting again leaves
	// exactly one route, neighbour and fdb entry per peer.
	macA, subnetA := vtepMAC(c, a), c.waitSubnetEnv(a).Subnet
	for _, h := range hosts {
		c.stop(h)
	}
	for _, h := range hosts {
		c.start(h)
	}
	for _, h := range hosts {
		eventually(t, 20*time.Second, func() error { return healthy(h) })
	}
	if got := vtepMAC(c, a); got != macA {
		t.Fatalf("VtepMAC changed across restart: %s -> %s", macA, got)
	}
	if got := c.waitSubnetEnv(a).Subnet; got != subnetA {
		t.Fatalf("subnet changed across restart: %v -> %v", subnetA, got)
	}
	meshPing(c, hosts, pods, "a", "b", "c")
	routes := c.sh(a.ns, "ip -4 route show dev flannel.1")
	neigh := c.sh(a.ns, "ip neigh show dev flannel.1 nud permanent")
	fdb := c.sh(a.ns, "bridge fdb show dev flannel.1 | grep dst")
	if countLines(routes) != 2 || countLines(neigh) != 2 || countLines(fdb) != 2 {
		t.Fatalf("want 2 routes, neighbours, fdb entries on a:\n%s\n%s\n%s", routes, neigh, fdb)
	}
}

// TestHostGWBackend: host-gw carries traffic between hosts on one LAN and reports,
// without installing a route, the host behind the router.
func TestHostGWBackend(t *testing.T) {
	c, hosts, pods := podCluster(t, "host-gw", map[string]string{"a": "lan1", "b": "lan1", "c": "lan2"})
	meshPing(c, hosts, pods, "a", "b")
	a, b := hosts["a"], hosts["b"]
	envB := c.waitSubnetEnv(b)
	if r := routeTo(c, a, envB.Subnet.String()); !strings.Contains(r, "via "+b.ip) {
		t.Fatalf("route to b on a: %q", r)
	}
	subnetC := c.waitSubnetEnv(hosts["c"]).Subnet.String()
	eventually(t, 15*time.Second, func() error {
		if !strings.Contains(a.logs(), hosts["c"].ip) {
			return fmt.Errorf("weftd on a did not report c (%s) as unreachable:\n%s", hosts["c"].ip, a.logs())
		}
		return nil
	})
	if r := routeTo(c, a, subnetC); r != "" {
		t.Fatalf("host-gw installed a route to the unreachable c: %q", r)
	}
	_ = pods
}

// TestVXLANDirectRouting: peers on the same LAN get a direct route, the one behind the
// router a vxlan path; both carry traffic, and a deleted direct route comes back.
func TestVXLANDirectRouting(t *testing.T) {
	c := newCluster(t, "v3")
	c.putConfig(`{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan","DirectRouting":true}}`)
	hosts, pods := map[string]*host{}, map[string]string{}
	for _, n := range []struct{ name, lan string }{{"a", "lan1"}, {"b", "lan1"}, {"c", "lan2"}} {
		hosts[n.name] = c.addHost(n.name, n.lan)
		c.start(hosts[n.name])
	}
	for name, h := range hosts {
		pods[name] = c.attachPod(h, c.waitSubnetEnv(h))
	}
	meshPing(c, hosts, pods, "a", "b", "c")
	a := hosts["a"]
	subnetB := c.waitSubnetEnv(hosts["b"]).Subnet.String()
	subnetC := c.waitSubnetEnv(hosts["c"]).Subnet.String()
	if r := routeTo(c, a, subnetB); !strings.Contains(r, "via "+hosts["b"].ip+" dev eth0") {
		t.Fatalf("DirectRouting route to b: %q", r)
	}
	if r := routeTo(c, a, subnetC); !strings.Contains(r, "dev flannel.1") {
		t.Fatalf("vxlan route to c: %q", r)
	}
	c.sh(a.ns, "ip route del "+subnetB)
	eventually(t, 25*time.Second, func() error {
		if r := routeTo(c, a, subnetB); !strings.Contains(r, "via "+hosts["b"].ip) {
			return fmt.Errorf("direct route to b not back: %q", r)
		}
		return nil
	})
}
