package e2e

import (
	"context"
	"strconv"
	"testing"
)

// TestPeersMixedFlanneld: weftd on a and the upstream flanneld on f, on vxlan and on
// udp: weftd reports f up (flanneld answers the probes as any host does: its tunnel
// device holds its subnet's first address), down with reason encap-blocked naming
// the port while f drops it, and up again. One etcd serves both backends in turn.
func TestPeersMixedFlanneld(t *testing.T) {
	c := newCluster(t, "v3")
	for _, tc := range []struct {
		backend string
		port    int
	}{
		{"vxlan", 8472},
		{"udp", 8285},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			c := c.sub(t)
			if err := c.lab.SetConfig(context.Background(), "", backendConfig(tc.backend)); err != nil {
				t.Fatal(err)
			}
			a, f := c.addHost(tc.backend+"-a", "lan1"), c.addHost(tc.backend+"-f", "lan2")
			startPeerHost(c, a, tc.backend)
			c.startFlanneld(f, nil)
			d := f.daemon
			t.Cleanup(func() {
				if err := d.Stop(); err != nil {
					t.Error(err)
				}
			})
			envA := c.waitSubnetEnv(a)
			port := strconv.Itoa(tc.port)
			awaitPeer(t, a, f, peerUpWithin, isUp(envA.MTU))
			unblock := blockIngress(t, f, "udp dport "+port)
			awaitPeer(t, a, f, peerDownWithin, isDown("encap-blocked", port))
			if n := unblock(); n == 0 {
				t.Errorf("f's rule dropped nothing: the tunnel's packets do not go to UDP %s", port)
			}
			awaitPeer(t, a, f, peerUpWithin, isUp(envA.MTU))
		})
	}
}
