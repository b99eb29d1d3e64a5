package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/lab"
)

// hostState is what the cleanup test compares: the host's devices, routes, permanent
// neighbours (weft's; the ARP cache's own entries come and go), fdb and firewall rules.
type hostState map[string]string

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// snapshot reads the state of h's namespace, normalised where the kernel's output
// changes without anyone changing the state (iptables-save's comments and counters).
func snapshot(c *cluster, h *host) hostState {
	c.t.Helper()
	// The kernel adds a link-local address and its routes to a link once duplicate
	// address detection ends: a snapshot taken before that would see them as a change.
	if strings.TrimSpace(c.sh(h.ns, "cat /proc/sys/net/ipv6/conf/eth0/disable_ipv6")) == "0" {
		eventually(c.t, 20*time.Second, func() error {
			out := c.sh(h.ns, "ip -6 addr show dev eth0 scope link")
			if !strings.Contains(out, "fe80::") || strings.Contains(out, "tentative") {
				return fmt.Errorf("eth0 of %s has no settled link-local address yet:\n%s", h.name, out)
			}
			return nil
		})
	}
	s := hostState{}
	for name, cmd := range map[string]string{
		"ip -d link":     "ip -d link",
		"ip route":       "ip route show table all",
		"ip neigh":       "ip neigh show nud permanent",
		"bridge fdb":     "bridge fdb show",
		"iptables-save":  "iptables-save",
		"nft list table": "nft list table ip weft 2>&1 || true",
	} {
		out := c.sh(h.ns, cmd)
		if name == "iptables-save" {
			out = normalIptables(out)
		}
		s[name] = out
	}
	return s
}

// normalIptables drops iptables-save's comments and counters, and the tables that
// hold nothing: no rules, no chains of their own, every policy ACCEPT. A table is
// instantiated by the first iptables command that touches it and cannot be unloaded
// again, but an empty one filters nothing: to packets it is the same as none.
func normalIptables(out string) string {
	var keep, table []string
	empty := true
	for _, l := range strings.Split(out, "\n") {
		l = counters.ReplaceAllString(l, "[0:0]")
		switch {
		case strings.HasPrefix(l, "#") || l == "":
		case strings.HasPrefix(l, "*"):
			table, empty = []string{l}, true
		case l == "COMMIT":
			if !empty {
				keep = append(append(keep, table...), l)
			}
			table = nil
		default:
			table = append(table, l)
			if !(strings.HasPrefix(l, ":") && strings.HasSuffix(l, " ACCEPT [0:0]")) {
				empty = false
			}
		}
	}
	return strings.Join(keep, "\n")
}

// diff names the parts of two snapshots that differ, with both versions.
func (s hostState) diff(o hostState) string {
	var b strings.Builder
	for k, v := range s {
		if o[k] != v {
			fmt.Fprintf(&b, "--- %s before:\n%s\n--- %s after:\n%s\n", k, v, k, o[k])
		}
	}
	return b.String()
}

// TestCleanup: weftd on vxlan, then udp (and host-gw), with --ip-masq and forward
// rules, is killed with SIGKILL, so it removes nothing itself; `weftd cleanup` then
// leaves the host exactly as before weftd started: devices, routes, permanent
// neighbours, fdb, iptables and nftables. The lease stays in etcd unless
// --release-lease (udp) or --uninstall (host-gw), which also removes the lease state
// file, as on a systemd host leaving weft for good.
func TestCleanup(t *testing.T) {
	if testing.Short() {
		t.Skip("needs root, network namespaces and etcd")
	}
	for _, backend := range []string{"vxlan", "udp", "host-gw"} {
		// udp also releases the lease; host-gw uninstalls (lease, state file and all).
		t.Run(backend, func(t *testing.T) { testCleanup(t, backend, backend == "udp", backend == "host-gw") })
	}
}

func testCleanup(t *testing.T, backend string, release, uninstall bool) {
	c := newCluster(t, "v3")
	c.putConfig(fmt.Sprintf(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":%q}}`, backend))
	a, b := c.addHost("a", "lan1"), c.addHost("b", "lan1")
	before := snapshot(c, a)

	c.start(a, "--ip-masq")
	c.start(b)
	envA := c.waitSubnetEnv(a)
	// The masquerade rules come before subnet.env, as flanneld's do: a pod started
	// once the file is there sends nothing unmasqueraded.
	if out := c.sh(a.ns, "iptables-save -t nat"); !strings.Contains(out, "MASQUERADE") {
		t.Fatalf("subnet.env written before the masquerade rules:\n%s", out)
	}
	envB := c.waitSubnetEnv(b)
	// a's data path reaches b: a route to b's subnet (udp: to the Network, via flannel0).
	dst := envB.Subnet.Masked().String()
	if backend == "udp" {
		dst = "198.18.0.0/16"
	}
	eventually(t, 20*time.Second, func() error {
		if r := routeTo(c, a, dst); r == "" {
			return fmt.Errorf("no route to %v on a", dst)
		}
		return nil
	})
	// SIGKILL: weftd gets no chance to tidy up.
	if err := a.daemon.Kill(); err != nil { // SIGKILL, as a crash; waits until it is gone
		t.Fatal(err)
	}
	killed := snapshot(c, a)
	if d := before.diff(killed); d == "" {
		t.Fatal("weftd changed nothing on a: the comparison below would prove nothing")
	}

	args := []string{"cleanup", "--subnet-file=" + a.subnetFile(),
		"--etcd-endpoints=" + lab.EtcdEndpoint, "--etcd-prefix=" + prefix}
	state := filepath.Join(a.daemon.Dir, "lease-state.json")
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("weftd kept no lease state: %v", err)
	}
	if release {
		args = append(args, "--release-lease")
	}
	if uninstall {
		args = append(args, "--uninstall", "--lease-state-file="+state)
		release = true
	}
	out, err := a.ns.Run(context.Background(), c.bin, args...)
	if err != nil {
		t.Fatalf("weftd cleanup: %v\n%s", err, out)
	}
	t.Logf("weftd cleanup:\n%s", out)
	if d := before.diff(snapshot(c, a)); d != "" {
		t.Fatalf("after weftd cleanup, a differs from before weftd started:\n%s", d)
	}
	if _, err := os.Stat(a.subnetFile()); !os.IsNotExist(err) {
		t.Errorf("subnet.env still there after cleanup (%v)", err)
	}
	_, held := c.leases()[envA.Subnet.Masked()]
	if held == release {
		t.Errorf("lease %v in etcd after cleanup: %v, want %v (--release-lease %v)", envA.Subnet, held, !release, release)
	}
	if _, err := os.Stat(state); os.IsNotExist(err) != uninstall {
		t.Errorf("lease state after cleanup: %v (--uninstall %v)", err, uninstall)
	}
	// Running it again finds nothing to do and succeeds.
	if out, err := a.ns.Run(context.Background(), c.bin, "cleanup", "--subnet-file="+a.subnetFile()); err != nil {
		t.Fatalf("weftd cleanup, second run: %v\n%s", err, out)
	}
	// b was not touched: its weftd still runs.
	if exited, err := b.daemon.Exited(); exited {
		t.Errorf("weftd on b exited: %v", err)
	}
}
