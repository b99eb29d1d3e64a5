package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/weftnet/weft/bench/kubecluster"
)

// TestDaemonSetNFTables runs deploy/weft.yml on the real two-node Kubernetes with
// vxlan and "EnableNFTables": true (which crash-looped while the image lacked nft):
// both nodes Ready, pods on the two nodes ping each other, and each node has weft's
// table ip weft and none of weft's iptables chains in either backend.
func TestDaemonSetNFTables(t *testing.T) {
	image := daemonSetPrereqs(t)
	start := time.Now()
	c := kubecluster.Start(t, kubecluster.Options{RepoRoot: "..", Images: []string{image}})
	t.Logf("cluster up in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	vxlan := dsNetConf(t, "vxlan")
	applyManifest(t, ctx, c.Admin, filepath.Join("..", "deploy", "weft.yml"), func(obj kruntime.Object) bool {
		keep := vxlan(obj)
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			cm.Data["net-conf.json"] = strings.Replace(cm.Data["net-conf.json"], "{", `{"EnableNFTables": true, `, 1)
		}
		return keep
	})
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
	t.Logf("vxlan with EnableNFTables: pods %s and %s ping each other, table ip weft on both nodes; %v after start",
		a.ip, b.ip, time.Since(start).Round(time.Millisecond))
}
