package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/netns"
)

// cniPath is CNI_PATH: the flannel CNI plugin (make deps builds it into bin/cni) and
// Debian's bridge and host-local plugins.
func cniPath(t *testing.T) string { return labtest.CNIPath(t, binDir()) }

// cniPod attaches a new pod namespace on h with the real flannel CNI plugin reading
// weftd's subnet.env, and returns the pod and its address. The lab runs DEL at cleanup.
func (c *cluster) cniPod(h *host) (*netns.NS, string) {
	c.t.Helper()
	p, err := c.lab.AttachCNIPod(context.Background(), h.lh, h.subnetFile(), cniPath(c.t))
	if err != nil {
		c.t.Fatal(err)
	}
	return p.NS, p.Addr.String()
}

// TestFlannelCNIPods: pods attached by the real flannel CNI plugin from weftd's
// subnet.env reach each other across hosts, on every backend (host-gw on one LAN, the
// others across the router).
func TestFlannelCNIPods(t *testing.T) {
	for _, tc := range []struct{ backend, lanB string }{{"udp", "lan2"}, {"vxlan", "lan2"}, {"host-gw", "lan1"}} {
		t.Run(tc.backend, func(t *testing.T) {
			c := newCluster(t, "v3")
			c.putConfig(fmt.Sprintf(`{"Network":"198.18.0.0/16","Backend":{"Type":%q}}`, tc.backend))
			a, b := c.addHost("a", "lan1"), c.addHost("b", tc.lanB)
			c.start(a)
			c.start(b)
			c.waitSubnetEnv(a)
			c.waitSubnetEnv(b)
			podA, ipA := c.cniPod(a)
			podB, ipB := c.cniPod(b)
			c.ping(podA, ipB)
			c.ping(podB, ipA)
			out, err := podA.Run(context.Background(), "ip", "-4", "route")
			if err != nil || !strings.Contains(out, "default via") {
				t.Fatalf("pod routes: %v: %s", err, out)
			}
		})
	}
}
