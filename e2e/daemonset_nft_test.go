package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/kubecluster"
)

// TestDaemonSetNFTables runs weft on the real two-node Kubernetes with vxlan and
// "EnableNFTables": true (which crash-looped while the image lacked nft), installed
// from deploy/weft.yml and, on a cluster of its own, with the Helm chart
// (flannel.enableNFTables): both nodes Ready, pods on the two nodes ping each other,
// and each node has weft's table ip weft and none of weft's iptables chains in either
// backend.
func TestDaemonSetNFTables(t *testing.T) {
	for _, in := range weftInstalls {
		t.Run(in.name, func(t *testing.T) { testDaemonSetNFTables(t, in) })
	}
}

func testDaemonSetNFTables(t *testing.T, in weftInstall) {
	image := daemonSetPrereqs(t)
	start := time.Now()
	c := kubecluster.Start(t, kubecluster.Options{RepoRoot: "..", Images: []string{image}})
	t.Logf("cluster up in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	in.install(t, ctx, c, true)
	checkNodes(t, ctx, c)
	checkDaemonSet(t, ctx, c.Admin, "weft")
	a := runPod(t, ctx, c, "pod-a", c.Nodes[0])
	b := runPod(t, ctx, c, "pod-b", c.Nodes[1])
	pingPod(t, ctx, c.Admin, a, b)
	pingPod(t, ctx, c.Admin, b, a)
	for _, n := range c.Nodes {
		table, err := n.Host.NS.Run(ctx, "nft", "list", "table", "ip", "weft")
		if err != nil || !strings.Contains(table, "masquerade") {
			t.Errorf("node %s: table ip weft: %v\n%s", n.Name, err, table)
		}
		for _, save := range []string{"iptables-legacy-save", "iptables-nft-save"} {
			if out, err := n.Host.NS.Run(ctx, save); err != nil || strings.Contains(out, "WEFT-") {
				t.Errorf("node %s: %s (%v) has weft's chains with EnableNFTables:\n%s", n.Name, save, err, out)
			}
		}
	}
	t.Logf("%s, vxlan with EnableNFTables: pods %s and %s ping each other, table ip weft on both nodes; %v after start",
		in.name, a.ip, b.ip, time.Since(start).Round(time.Millisecond))
}
