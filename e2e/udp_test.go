package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/proxy"
)

// TestUDPBackend: three weftd hosts, one behind a router, carry pod traffic over the
// udp backend; hosts join and leave; datagrams from strangers are dropped and counted.
func TestUDPBackend(t *testing.T) {
	c, hosts, pods := podCluster(t, "udp", map[string]string{"a": "lan1", "b": "lan1", "c": "lan2"})
	meshPing(c, hosts, pods, "a", "b", "c")
	if bps := iperfTCP(t, hosts["a"].pod, hosts["c"].pod, pods["c"], 2); bps <= 0 {
		t.Fatalf("iperf3 a->c: %v bit/s", bps)
	}
	t.Logf("udp backend, pod a -> pod c across the router: %.2f Gbit/s", iperfTCP(t, hosts["a"].pod, hosts["c"].pod, pods["c"], 2)/1e9)

	// A host joining becomes reachable.
	d := c.addHost("d", "lan2")
	c.start(d)
	envD := c.waitSubnetEnv(d)
	hosts["d"], pods["d"] = d, c.attachPod(d, envD)
	meshPing(c, hosts, pods, "a", "d")

	// A host leaving (its lease gone) makes its subnet answer ICMP net unreachable.
	c.stop(d)
	c.deleteLease(envD.Subnet)
	eventually(t, 15*time.Second, func() error {
		out, _ := hosts["a"].pod.Run(context.Background(), "ping", "-c", "1", "-W", "1", pods["d"])
		if !strings.Contains(out, "Unreachable") {
			return fmt.Errorf("no ICMP unreachable for the departed subnet: %s", out)
		}
		return nil
	})

	// Datagrams from an address without a lease (the router) are dropped and counted.
	before, err := udpStats(hosts["a"])
	if err != nil {
		t.Fatal(err)
	}
	conn, err := c.router.DialContext(context.Background(), "udp", hosts["a"].ip+":8285")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	inner := ipv4Packet(t, "198.18.200.2", pods["a"])
	const n = 5
	for i := 0; i < n; i++ {
		if _, err := conn.Write(inner); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, func() error {
		s, err := udpStats(hosts["a"])
		if err != nil {
			return err
		}
		if got := s.Dropped(proxy.DropUnknownSource) - before.Dropped(proxy.DropUnknownSource); got < n {
			return fmt.Errorf("unknown_source drops rose by %d, want %d (stats %+v)", got, n, s)
		}
		return nil
	})
	// The data path still works after the junk.
	c.ping(hosts["a"].pod, pods["b"])
}
