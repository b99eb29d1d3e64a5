package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/testenv"
)

// recoverWithin is how soon after the external interface's return weftd must have
// its data path back: devices, routes, neighbour and fdb entries, and pings across.
const recoverWithin = 2 * time.Second

// TestIfaceBack: the external interface (eth0) of host a is deleted and made again, as
// re-creating a bond, VLAN or bridge does (flannel #2247, k3s #14086), first with the
// same address, then with another one. The kernel takes flannel.1 and the routes with
// it; weftd must find the interface again by name (a new index) and put back its
// data path within recoverWithin of the return: vxlan makes flannel.1 again on the
// new eth0 with every route, neighbour and fdb entry, host-gw its routes, udp its
// sockets (rebound to the new address); wireguard's device, not bound to eth0, needs
// nothing. With another address, a's lease in etcd gets it as PublicIP and b's routes
// (host-gw), fdb entry (vxlan) or WireGuard peer endpoint point to it. In Kubernetes
// mode (vxlan) node a's public-ip annotation gets it.
func TestIfaceBack(t *testing.T) {
	for _, backend := range []string{"vxlan", "host-gw", "udp", "wireguard"} {
		t.Run(backend, func(t *testing.T) { testIfaceBack(t, backend, false) })
	}
	t.Run("vxlan kube", func(t *testing.T) { testIfaceBack(t, "vxlan", true) })
}

func testIfaceBack(t *testing.T, backend string, kube bool) {
	testenv.NeedTools(t, "ss", "bridge")
	c, hosts, pods, publicIP := ifaceBackCluster(t, backend, kube)
	a, b := hosts["a"], hosts["b"]
	meshPing(c, hosts, pods, "a", "b")
	subnetA, subnetB := c.waitSubnetEnv(a).Subnet, c.waitSubnetEnv(b).Subnet
	var macA, macB, keyA string
	switch backend {
	case "vxlan":
		macA, macB = linkMAC(c, a, "flannel.1"), linkMAC(c, b, "flannel.1")
	case "wireguard":
		keyA, _ = wgLeaseData(c, a)
	}
	ctx := context.Background()
	// pingOnce waits 0.3 s for the reply: the recovery is timed to that.
	pingOnce := func(from *host, dst string) error {
		out, err := from.pod.Run(ctx, "ping", "-c", "1", "-W", "0.3", dst)
		if err != nil {
			return fmt.Errorf("ping %s: %v: %s", dst, err, out)
		}
		return nil
	}
	// present is a's data path to b, as the backend programs it, on eth0 at addr.
	present := func(addr netip.Addr) error {
		switch backend {
		case "vxlan":
			if out, _ := a.ns.Run(ctx, "ip", "-d", "-o", "link", "show", "flannel.1"); !strings.Contains(out, "local "+addr.String()+" dev eth0 ") {
				return fmt.Errorf("flannel.1 not on eth0 from %v: %q", addr, out)
			}
			if r := routeTo(c, a, subnetB.String()); !strings.Contains(r, "dev flannel.1") || !strings.Contains(r, "onlink") {
				return fmt.Errorf("route to %v: %q", subnetB, r)
			}
			if out, _ := a.ns.Run(ctx, "ip", "neigh", "show", subnetB.Addr().String(), "dev", "flannel.1"); !strings.Contains(out, macB) {
				return fmt.Errorf("neighbour %v: %q", subnetB.Addr(), out)
			}
			if out, _ := a.ns.Run(ctx, "bridge", "fdb", "show", "dev", "flannel.1"); !strings.Contains(out, macB+" dst "+b.ip+" ") {
				return fmt.Errorf("fdb entry %s: %q", macB, out)
			}
		case "host-gw":
			if r := routeTo(c, a, subnetB.String()); !strings.Contains(r, "via "+b.ip+" dev eth0") {
				return fmt.Errorf("route to %v: %q", subnetB, r)
			}
		case "udp", "wireguard":
			dev := map[string]string{"udp": "flannel0", "wireguard": "flannel-wg"}[backend]
			if r := routeTo(c, a, "198.18.0.0/16"); !strings.Contains(r, "dev "+dev) {
				return fmt.Errorf("route to the overlay: %q", r)
			}
			if backend == "wireguard" {
				break
			}
			if out, _ := a.ns.Run(ctx, "ss", "-Hunl"); !strings.Contains(out, addr.String()+":8285") {
				return fmt.Errorf("no socket on %v:8285: %q", addr, out)
			}
		}
		return nil
	}

	for _, tc := range []struct {
		name    string
		newAddr bool
	}{{"same address", false}, {"new address", true}} {
		if err := c.lab.DeleteLAN(ctx, a.lh); err != nil {
			t.Fatal(err)
		}
		// The outage is real: nothing crosses until eth0 is back.
		if err := pingOnce(a, pods["b"]); err == nil {
			t.Fatalf("%s: a's pod reaches b's with eth0 deleted", tc.name)
		}
		start := time.Now()
		addr, err := c.lab.RestoreLAN(ctx, a.lh, tc.newAddr)
		if err != nil {
			t.Fatal(err)
		}
		restored := time.Since(start)
		routes, err := within(start, recoverWithin, func() error { return present(addr) })
		if err != nil {
			t.Fatalf("%s: a's data path not back %v after eth0 (%v) returned: %v\n%s", tc.name, routes, addr, err, a.logs())
		}
		ping, err := within(start, recoverWithin, func() error { return pingOnce(a, pods["b"]) })
		if err != nil {
			t.Fatalf("%s: no ping a -> b %v after eth0 (%v) returned: %v\n%s", tc.name, ping, addr, err, a.logs())
		}
		t.Logf("%s %s: eth0 made again in %v; data path back %v and first ping across %v after the re-creation began",
			backend, tc.name, restored.Round(time.Millisecond), routes.Round(time.Millisecond), ping.Round(time.Millisecond))
		if err := pingOnce(b, pods["a"]); err != nil {
			t.Fatalf("%s: b -> a: %v", tc.name, err)
		}
		if !tc.newAddr {
			continue
		}
		// Another address: a's lease publishes it and b sends to it.
		eventually(t, 10*time.Second, func() error {
			if got := publicIP(); got != addr {
				return fmt.Errorf("a's lease (or node) has public IP %v, want %v", got, addr)
			}
			return nil
		})
		switch backend {
		case "host-gw":
			if r := routeTo(c, b, subnetA.String()); !strings.Contains(r, "via "+addr.String()+" dev eth0") {
				t.Fatalf("b's route to a: %q", r)
			}
		case "vxlan":
			if out := c.sh(b.ns, "bridge fdb show dev flannel.1"); !strings.Contains(out, macA+" dst "+addr.String()+" ") {
				t.Fatalf("b's fdb entry for a (%s) is not to %v:\n%s", macA, addr, out)
			}
		case "wireguard":
			eventually(t, 10*time.Second, func() error {
				if p := wgPeers(c, b, "flannel-wg")[keyA]; p.endpoint != addr.String()+":51820" {
					return fmt.Errorf("b's peer for a: endpoint %q, want %v:51820", p.endpoint, addr)
				}
				return nil
			})
		}
	}
}

// within polls f until it returns nil or limit has passed since start, and returns
// how long after start that was (with f's last error when it never did).
func within(start time.Time, limit time.Duration, f func() error) (time.Duration, error) {
	for {
		err := f()
		if err == nil || time.Since(start) > limit {
			return time.Since(start), err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ifaceBackCluster is podCluster with hosts a and b on lan1 for backend: in etcd mode,
// or in Kubernetes mode with nodes node-a and node-b (podCIDRs 198.18.10.0/24 and
// 198.18.20.0/24). publicIP reads a's published public address: its lease's PublicIP,
// or its node's public-ip annotation.
func ifaceBackCluster(t *testing.T, backend string, kube bool) (*cluster, map[string]*host, map[string]string, func() netip.Addr) {
	t.Helper()
	names := map[string]string{"a": "lan1", "b": "lan1"}
	switch {
	case kube:
		c := newCluster(t, "v3")
		_, cs, id := kubeCluster(t, c)
		conf := netConf(t, backend)
		hosts := map[string]*host{}
		cidrs := map[string]string{"a": "198.18.10.0/24", "b": "198.18.20.0/24"}
		for _, name := range []string{"a", "b"} {
			createNode(t, cs, "node-"+name, cidrs[name])
			hosts[name] = c.addHost(name, names[name])
			c.startKube(hosts[name], cs, id, conf)
		}
		pods := c.podsOnPodCIDRs(hosts, cidrs)
		return c, hosts, pods, func() netip.Addr {
			ip, _ := netip.ParseAddr(getNode(t, cs, "node-a").Annotations["flannel.alpha.coreos.com/public-ip"])
			return ip
		}
	case backend == "wireguard":
		c := newCluster(t, "v3")
		c.putConfig(wgConfig)
		hosts, pods := map[string]*host{}, map[string]string{}
		for _, name := range []string{"a", "b"} {
			hosts[name] = c.addHost(name, names[name])
			startWG(c, hosts[name])
		}
		for name, h := range hosts {
			pods[name] = c.attachPod(h, c.waitSubnetEnv(h))
		}
		return c, hosts, pods, leasePublicIP(c, hosts["a"])
	default:
		c, hosts, pods := podCluster(t, backend, names)
		return c, hosts, pods, leasePublicIP(c, hosts["a"])
	}
}

// leasePublicIP reads the PublicIP of h's lease in etcd.
func leasePublicIP(c *cluster, h *host) func() netip.Addr {
	subnet := c.waitSubnetEnv(h).Subnet
	return func() netip.Addr { return c.leases()[subnet].attrs.PublicIP }
}

// linkMAC is the MAC address of device dev on h (flannel.1's is the VtepMAC the
// daemon published, in etcd or on its node).
func linkMAC(c *cluster, h *host, dev string) string {
	c.t.Helper()
	f := strings.Fields(c.sh(h.ns, "ip -o link show "+dev))
	for i := range f[:len(f)-1] {
		if f[i] == "link/ether" {
			return f[i+1]
		}
	}
	c.t.Fatalf("no MAC address for %s on %s: %q", dev, h.name, f)
	return ""
}
