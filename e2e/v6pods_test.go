package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
)

// TestIPv6Pods: two hosts on LAN1 with an IPv6 underlay (2001:db8:1::/64) run the real
// weftd (host a) and weftd or the upstream flanneld v0.28.10 (host b) on one etcd; pods
// attached by the real flannel CNI plugin from each daemon's subnet.env reach each other
// both ways in every family the network has (ping and ping6): dual-stack vxlan and
// host-gw and udp, IPv6-only vxlan, host-gw and udp (which then carries everything
// over the IPv6 underlay: checked by the kernel's UDP6 counters and an iperf3 transfer),
// and dual-stack vxlan and host-gw mixed with flanneld. With
// --ip-masq weftd writes its masquerade rules for each family (ip6tables too, and only
// ip6tables on IPv6-only), and `weftd cleanup` takes them away again with flannel-v6.<VNI>.
func TestIPv6Pods(t *testing.T) {
	const (
		dual    = `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":%q}}`
		v6only  = `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":%q}}`
		weftd   = "weftd"
		flannel = "flanneld"
	)
	for _, tc := range []struct {
		name, config, backend, peer string
		v4, masq                    bool
	}{
		{"vxlan-dual-stack", dual, "vxlan", weftd, true, true},
		{"host-gw-dual-stack", dual, "host-gw", weftd, true, false},
		{"vxlan-ipv6-only", v6only, "vxlan", weftd, false, true},
		{"udp-dual-stack", dual, "udp", weftd, true, true},
		{"host-gw-ipv6-only", v6only, "host-gw", weftd, false, false},
		{"udp-ipv6-only", v6only, "udp", weftd, false, true},
		{"vxlan-dual-stack-flanneld", dual, "vxlan", flannel, true, false},
		{"host-gw-dual-stack-flanneld", dual, "host-gw", flannel, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.SkipShort(t, "a namespace lab with etcd, weftd and the CNI plugins")
			c := newCluster(t, "v3")
			c.putConfig(fmt.Sprintf(tc.config, tc.backend))
			a, b := c.addHost("a", "lan1"), c.addHost("b", "lan1")
			for h, addr := range map[*host]string{a: "2001:db8:1::11", b: "2001:db8:1::12"} {
				c.sh(h.ns, "ip -6 addr add "+addr+"/64 dev eth0 nodad")
			}
			var args []string
			if tc.masq {
				args = append(args, "--ip-masq")
			}
			if tc.peer == flannel {
				c.startFlanneld(b, nil)
			} else {
				c.start(b, args...)
			}
			c.start(a, args...)
			envA, envB := c.waitSubnetEnv(a), c.waitSubnetEnv(b)
			for h, env := range map[*host]struct{ v4, v6 bool }{
				a: {envA.Subnet.IsValid(), envA.IPv6Subnet.IsValid()},
				b: {envB.Subnet.IsValid(), envB.IPv6Subnet.IsValid()},
			} {
				if env.v4 != tc.v4 || !env.v6 {
					t.Fatalf("subnet.env on %s: IPv4 subnet %v (want %v), IPv6 subnet %v", h.name, env.v4, tc.v4, env.v6)
				}
			}
			podA, podB := c.cniPodBoth(a), c.cniPodBoth(b)
			udp6Before := udp6Out(c, a.ns)
			for _, dir := range []struct {
				from *netns.NS
				to   *lab.Pod
			}{{podA.NS, podB}, {podB.NS, podA}} {
				if tc.v4 {
					if !dir.to.Addr.Is4() {
						t.Fatalf("pod %s has no IPv4 address", dir.to.Addr)
					}
					c.ping(dir.from, dir.to.Addr.String())
				}
				c.ping(dir.from, dir.to.Addr6.String())
			}
			if tc.backend == "udp" && !tc.v4 {
				// Every packet went over the IPv6 underlay: a's UDP6 socket sent at least
				// the pings, and a TCP transfer crosses it.
				if n := udp6Out(c, a.ns) - udp6Before; n < 2 {
					t.Errorf("host a sent %d UDP6 datagrams for the pings; want them over the IPv6 underlay", n)
				}
				if bps := iperfTCP(t, podA.NS, podB.NS, podB.Addr6.String(), 1); bps <= 0 {
					t.Fatalf("iperf3 over IPv6-only udp: %v bit/s", bps)
				}
			}
			if tc.backend == "vxlan" {
				links := c.sh(a.ns, "ip -o link show")
				if !strings.Contains(links, "flannel-v6.1:") || strings.Contains(links, "flannel.1:") != tc.v4 {
					t.Errorf("vxlan devices on a (want flannel-v6.1, flannel.1 only with IPv4):\n%s", links)
				}
			}
			if !tc.masq {
				return
			}
			// weftd's masquerade rules, per family; none for IPv4 on an IPv6-only network.
			v6rules := c.sh(a.ns, "ip6tables-save -t nat")
			if !strings.Contains(v6rules, "-A WEFT-POSTRTG") || !strings.Contains(v6rules, "fd00:db8::/48") {
				t.Errorf("ip6tables nat on a has no WEFT-POSTRTG rules for fd00:db8::/48:\n%s", v6rules)
			}
			if v4rules := c.sh(a.ns, "iptables-save -t nat"); strings.Contains(v4rules, "-A WEFT-POSTRTG") != tc.v4 {
				t.Errorf("iptables nat on a (want WEFT-POSTRTG rules: %v):\n%s", tc.v4, v4rules)
			}
			c.stop(a)
			c.cleanup(a)
			if v6rules := c.sh(a.ns, "ip6tables-save"); strings.Contains(v6rules, "WEFT-") {
				t.Errorf("ip6tables after weftd cleanup still has weft's chains:\n%s", v6rules)
			}
			if links := c.sh(a.ns, "ip -o link show"); strings.Contains(links, "flannel") {
				t.Errorf("devices after weftd cleanup:\n%s", links)
			}
		})
	}
}

// cniPodBoth attaches a pod on h with the real flannel CNI plugin from its daemon's
// subnet.env and returns it with its addresses (IPv4 and IPv6 on a dual-stack network).
func (c *cluster) cniPodBoth(h *host) *lab.Pod {
	c.t.Helper()
	p, err := c.lab.AttachCNIPod(context.Background(), h.lh, h.subnetFile(), cniPath(c.t))
	if err != nil {
		c.t.Fatal(err)
	}
	if !p.Addr6.IsValid() {
		c.t.Fatalf("pod on %s has no IPv6 address", h.name)
	}
	return p
}

// udp6Out returns the UDP datagrams the kernel of ns has sent over IPv6
// (Udp6OutDatagrams in /proc/net/snmp6, which is the namespace's own).
func udp6Out(c *cluster, ns *netns.NS) uint64 {
	c.t.Helper()
	for _, line := range strings.Split(c.sh(ns, "cat /proc/net/snmp6"), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "Udp6OutDatagrams" {
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				c.t.Fatalf("Udp6OutDatagrams %q: %v", f[1], err)
			}
			return n
		}
	}
	c.t.Fatalf("no Udp6OutDatagrams in /proc/net/snmp6 of %s", ns.Name)
	return 0
}
