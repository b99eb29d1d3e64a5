package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftnet/weft/bench/kubecluster"
	"github.com/weftnet/weft/bench/testenv"
)

// TestDaemonSetLegacyIPTables runs deploy/weft.yml (vxlan) on the real two-node
// Kubernetes where both nodes' firewall is iptables-legacy (kubecluster's
// LegacyIPTables: the kubelet and containerd run the -legacy tools as iptables, so
// the kubelet's KUBE-IPTABLES-HINT is in the legacy tables). weftd, from an image
// holding both backends, must pick legacy (firewall.DetectIPTablesMode): nodes Ready,
// pods on the two nodes ping each other and move TCP data, weft's WEFT-* chains are
// in iptables-legacy-save and in nothing of nft's, and weftd's log and
// weft_firewall_info say legacy.
//
// The legacy tables live in the nodes' network namespaces and die with them; the
// test checks at the very end that those namespaces are gone with nothing left in
// them and that its own namespace holds the same legacy tables as before (none on a
// host that never used legacy iptables), so tests after it (TestNFTCoexistsWithIptables
// wants no legacy table, or nft's iptables warns on every call) see nothing of it.
//
// It runs twice, each time on a cluster of its own: weft installed from deploy/weft.yml,
// and with the Helm chart.
func TestDaemonSetLegacyIPTables(t *testing.T) {
	for _, in := range weftInstalls {
		t.Run(in.name, func(t *testing.T) { testDaemonSetLegacyIPTables(t, in) })
	}
}

func testDaemonSetLegacyIPTables(t *testing.T, in weftInstall) {
	image := daemonSetPrereqs(t)
	testenv.NeedTools(t, "iptables-legacy", "iptables-legacy-save", "ip6tables-legacy-save",
		"iptables-nft-save", "ip6tables-nft-save", "nft")
	before := legacyTables(t)
	nsInodes := map[string]uint64{}                            // the cluster's network namespaces, filled once it runs
	t.Cleanup(func() { checkLegacyGone(t, before, nsInodes) }) // runs after the cluster's cleanups

	start := time.Now()
	c := kubecluster.Start(t, kubecluster.Options{RepoRoot: "..", Images: []string{image},
		LegacyIPTables: []string{"node1", "node2"}})
	for _, name := range c.Lab.State().Namespaces {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join("/run/netns", name), &st); err != nil {
			t.Fatal(err)
		}
		nsInodes[name] = st.Ino
	}
	t.Logf("cluster up in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The kubelets write their hint chain into legacy iptables, nothing into nft's.
	for _, n := range c.Nodes {
		await(t, ctx, n.Name+": the kubelet's hint chain in legacy iptables", func() (bool, string) {
			out, err := n.Host.NS.Run(ctx, "iptables-legacy-save")
			return err == nil && strings.Contains(out, ":KUBE-IPTABLES-HINT "), fmt.Sprintf("%v\n%s", err, out)
		})
		if out := nftSaves(t, ctx, n); strings.Contains(out, "KUBE-") {
			t.Fatalf("node %s: the kubelet wrote into iptables-nft:\n%s", n.Name, out)
		}
	}

	in.install(t, ctx, c, false)
	checkNodes(t, ctx, c)
	checkDaemonSet(t, ctx, c.Admin, "weft")
	a := runPod(t, ctx, c, "pod-a", c.Nodes[0])
	b := runPod(t, ctx, c, "pod-b", c.Nodes[1])
	pingPod(t, ctx, c.Admin, a, b)
	pingPod(t, ctx, c.Admin, b, a)
	tcpPods(t, a, b, 8<<20)
	tcpPods(t, b, a, 8<<20)

	for _, n := range c.Nodes {
		legacy, err := n.Host.NS.Run(ctx, "iptables-legacy-save")
		if err != nil || !strings.Contains(legacy, "-A FORWARD -m comment --comment \"weft forward\" -j WEFT-FWD") ||
			!strings.Contains(legacy, "-j WEFT-POSTRTG") {
			t.Errorf("node %s: weft's chains are not in legacy iptables (%v):\n%s", n.Name, err, legacy)
		}
		if out := nftSaves(t, ctx, n); strings.Contains(out, "WEFT-") {
			t.Errorf("node %s: weft's chains in iptables-nft on a legacy node:\n%s", n.Name, out)
		}
		if out, err := n.Host.NS.Run(ctx, "nft", "list", "ruleset"); err != nil || strings.Contains(strings.ToLower(out), "weft") {
			t.Errorf("node %s: nft list ruleset (%v) holds weft's rules:\n%s", n.Name, err, out)
		}
		log := weftLog(t, ctx, c, n.Name)
		if !strings.Contains(log, `"msg":"iptables mode detected","backend":"iptables-legacy","reason":"the kubelet's chains are in legacy iptables"`) {
			t.Errorf("node %s: weftd did not log legacy mode from the kubelet's chains:\n%s", n.Name, log)
		}
		if m := nodeMetrics(t, ctx, n); !strings.Contains(m, `weft_firewall_info{backend="iptables-legacy"} 1`) {
			t.Errorf("node %s: /metrics lacks weft_firewall_info{backend=\"iptables-legacy\"} 1:\n%s", n.Name, grepLines(m, "weft_firewall"))
		}
	}
	t.Logf("%s, vxlan on iptables-legacy nodes: pods %s and %s ping and move TCP, WEFT-* in legacy only; %v after start",
		in.name, a.ip, b.ip, time.Since(start).Round(time.Millisecond))
}

// nftSaves is what iptables-nft-save and ip6tables-nft-save print in n's namespace.
func nftSaves(t *testing.T, ctx context.Context, n *kubecluster.Node) string {
	t.Helper()
	var all string
	for _, save := range []string{"iptables-nft-save", "ip6tables-nft-save"} {
		out, err := n.Host.NS.Run(ctx, save)
		if err != nil {
			t.Fatalf("node %s: %s: %v", n.Name, save, err)
		}
		all += out
	}
	return all
}

// weftLog is the log of the weft container of the DaemonSet's pod on node.
func weftLog(t *testing.T, ctx context.Context, c *kubecluster.Cluster, node string) string {
	t.Helper()
	pods, err := c.Admin.CoreV1().Pods("kube-flannel").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("weft's pod on %s: %v (%d pods)", node, err, len(pods.Items))
	}
	out, err := c.Admin.CoreV1().Pods("kube-flannel").GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{Container: "weft"}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("log of %s: %v", pods.Items[0].Name, err)
	}
	return string(out)
}

// nodeMetrics is weftd's /metrics on node n (the manifest's --healthz-port, host network).
func nodeMetrics(t *testing.T, ctx context.Context, n *kubecluster.Node) string {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: n.Host.NS.DialContext}, Timeout: 5 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:8081/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("node %s: /metrics: %v", n.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// legacyTables lists the legacy iptables tables (IPv4, IPv6) the kernel holds in the
// test's own network namespace. Reading the list creates nothing.
func legacyTables(t *testing.T) string {
	t.Helper()
	var all string
	for _, f := range []string{"/proc/self/net/ip_tables_names", "/proc/self/net/ip6_tables_names"} {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		all += f + ": " + strings.Join(strings.Fields(string(b)), " ") + "\n"
	}
	return all
}

// checkLegacyGone checks, after the cluster is down, that the test's namespace holds
// the legacy tables it held before, and that each of the cluster's namespaces (by
// name and inode), and with it the legacy tables in it, is gone: no name under
// /run/netns and no process left in it.
func checkLegacyGone(t *testing.T, before string, nsInodes map[string]uint64) {
	if after := legacyTables(t); after != before {
		t.Errorf("legacy iptables tables in the test's namespace changed:\n%swant:\n%s", after, before)
	}
	held := map[uint64]bool{}
	for _, ino := range nsInodes {
		held[ino] = false
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, p := range procs {
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil {
			if _, ok := held[st.Ino]; ok {
				held[st.Ino] = true
			}
		}
	}
	for name, ino := range nsInodes {
		if _, err := os.Stat(filepath.Join("/run/netns", name)); err == nil {
			t.Errorf("namespace %s left behind (its legacy tables with it)", name)
		}
		if held[ino] {
			t.Errorf("a process still runs in the cluster's namespace %s (its legacy tables live on)", name)
		}
	}
}
