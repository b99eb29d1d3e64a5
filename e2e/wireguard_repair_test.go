package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pingWithin waits up to d for one ping from h's pod to dst to come back and returns
// how long that took.
func pingWithin(t *testing.T, h *host, dst string, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	eventually(t, d, func() error {
		out, err := h.pod.Run(context.Background(), "ping", "-c", "1", "-W", "1", dst)
		if err != nil {
			return fmt.Errorf("ping %s from %s's pod: %v: %s", dst, h.name, err, out)
		}
		return nil
	})
	return time.Since(start)
}

// TestWireGuardRepair: flannel-wg deleted from under weftd (ip link del) is made
// again at once with its address, route and peer, and pods ping across again within
// restartPingWithin; the network's route deleted is put back. Both count in
// weft_reconcile_repairs_total.
func TestWireGuardRepair(t *testing.T) {
	c := wgCluster(t)
	a, b := c.addHost("a", "lan1"), c.addHost("b", "lan1")
	startWG(c, a)
	startWG(c, b)
	envA, envB := c.waitSubnetEnv(a), c.waitSubnetEnv(b)
	podA, podB := c.attachPod(a, envA), c.attachPod(b, envB)
	c.ping(a.pod, podB)
	c.ping(b.pod, podA)
	keyB, _ := wgLeaseData(c, b)
	waitHandshake(c, a, keyB, 0)

	c.sh(a.ns, "ip link del flannel-wg")
	took := pingWithin(t, b, podA, restartPingWithin)
	t.Logf("first ping b -> a %v after flannel-wg was deleted on a", took.Round(time.Millisecond))
	pingWithin(t, a, podB, restartPingWithin)
	if p := waitHandshake(c, a, keyB, 0); p.endpoint != b.ip+":51820" || p.allowed != envB.Subnet.String() {
		t.Fatalf("peer b on a's new flannel-wg: %+v", p)
	}
	if addr := c.sh(a.ns, "ip -4 -o addr show dev flannel-wg"); !strings.Contains(addr, envA.Subnet.Addr().String()+"/32") {
		t.Fatalf("flannel-wg address on a: %q", addr)
	}
	if _, err := os.Stat(filepath.Join(wgDir(c, a), "sock", "flannel-wg.sock")); err != nil {
		t.Fatalf("UAPI socket of the new device: %v", err)
	}
	if v := mustScrape(t, a).must(t, "weft_reconcile_repairs_total", "backend", "wireguard", "object", "device"); v != 1 {
		t.Fatalf("weft_reconcile_repairs_total{object=device} = %v, want 1", v)
	}

	c.sh(a.ns, "ip route del 198.18.0.0/16 dev flannel-wg")
	eventually(t, 5*time.Second, func() error {
		if r := routeTo(c, a, "198.18.0.0/16"); !strings.Contains(r, "dev flannel-wg") {
			return fmt.Errorf("route to the network on a: %q", r)
		}
		return nil
	})
	pingWithin(t, a, podB, restartPingWithin)
	if v := mustScrape(t, a).must(t, "weft_reconcile_repairs_total", "backend", "wireguard", "object", "route"); v != 1 {
		t.Fatalf("weft_reconcile_repairs_total{object=route} = %v, want 1", v)
	}
}

// TestWireGuardPeerKeyChange: b's key file removed and its weftd restarted, b's lease
// (same subnet) names a new PublicKey; a takes it: pods ping across again within
// wgKeyChangeWithin (derived from WireGuard's handshake retry), and a's device has the
// new key and not the old one.
func TestWireGuardPeerKeyChange(t *testing.T) {
	c := wgCluster(t)
	a, b := c.addHost("a", "lan1"), c.addHost("b", "lan1")
	startWG(c, a)
	startWG(c, b)
	envA, envB := c.waitSubnetEnv(a), c.waitSubnetEnv(b)
	podA, podB := c.attachPod(a, envA), c.attachPod(b, envB)
	c.ping(a.pod, podB)
	oldB, _ := wgLeaseData(c, b)
	waitHandshake(c, a, oldB, 0)

	c.stop(b)
	if err := os.Remove(filepath.Join(wgDir(c, b), "wgkey")); err != nil {
		t.Fatal(err)
	}
	startWG(c, b)
	if env := c.waitSubnetEnv(b); env.Subnet != envB.Subnet {
		t.Fatalf("b's subnet changed across the restart: %v -> %v", envB.Subnet, env.Subnet)
	}
	// subnet.env is there from the first run: wait for the lease itself.
	var newB string
	eventually(t, 15*time.Second, func() error {
		if newB, _ = wgLeaseData(c, b); newB == oldB {
			return fmt.Errorf("b's lease still has the old key %s", oldB)
		}
		return nil
	})
	took := pingWithin(t, b, podA, wgKeyChangeWithin)
	t.Logf("first ping b -> a %v after b's lease had the new key", took.Round(time.Millisecond))
	pingWithin(t, a, podB, wgKeyChangeWithin)
	waitHandshake(c, a, newB, 0)
	eventually(t, 5*time.Second, func() error {
		if p, ok := wgPeers(c, a, "flannel-wg")[oldB]; ok {
			return fmt.Errorf("a's flannel-wg still has b's old key: %+v", p)
		}
		return nil
	})
	if n := len(wgPeers(c, a, "flannel-wg")); n != 1 {
		t.Fatalf("a's flannel-wg has %d peers, want 1", n)
	}
}
