package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chartutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/weftnet/weft/bench/kubecluster"
)

// k3sDoc is the page whose commands and values TestK3sLayout runs.
const k3sDoc = "../docs/k3s-rke2.md"

// k3sDataDir lays out what a k3s agent's data directory holds before weft comes:
// k3s unpacks its binaries into data/<hash>/bin, points data/current at that
// directory and links the CNI plugins from the stable data/cni (cmd/k3s/main.go,
// extract). Debian's plugins stand in for k3s's multi-call cni binary. The CNI config
// directory of k3s's embedded flannel stays empty with flannel-backend none.
const k3sDataDir = `d=/var/lib/rancher/k3s/data
h=$d/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
mkdir -p $h/bin $d/cni /var/lib/rancher/k3s/agent/etc/cni/net.d
for p in bridge host-local portmap loopback; do
  cp /usr/lib/cni/$p $h/bin/$p
  ln -s $h/bin/$p $d/cni/$p
done
ln -s $h $d/current
`

// TestK3sLayout runs weft from its chart on the real two-node cluster
// (bench/kubecluster) with each node laid out as a k3s agent started with
// flannel-backend none: k3s's data directory with its CNI plugins, an empty
// /opt/cni/bin, and containerd reading /opt/cni/bin and /etc/cni/net.d, the
// directories k3s leaves it with flannel off. It runs docs/k3s-rke2.md's node step on
// each node as written and installs the chart with the page's k3s values (podCidr
// replaced by the lab's range), then checks the DaemonSet and nodes Ready, where weft
// put its CNI files, and pods on the two nodes pinging each other. RKE2's values on
// the page must equal k3s's: its layout is the default one of the other chart tests.
func TestK3sLayout(t *testing.T) {
	image := daemonSetPrereqs(t)
	doc, err := os.ReadFile(k3sDoc)
	if err != nil {
		t.Fatal(err)
	}
	nodeStep := docBlock(t, string(doc), "weft:k3s-node")
	values := labValues(t, docBlock(t, string(doc), "weft:k3s-values"))
	rke2 := labValues(t, docBlock(t, string(doc), "weft:rke2-values"))
	if a, b := yamlOf(t, rke2), yamlOf(t, values); a != b {
		t.Errorf("%s: RKE2's values differ from k3s's:\n%s\n%s", k3sDoc, a, b)
	}
	for _, block := range []string{"weft:k3s-config", "weft:rke2-config"} {
		docBlock(t, string(doc), block) // present and fenced
	}

	start := time.Now()
	c := kubecluster.Start(t, kubecluster.Options{RepoRoot: "..", Images: []string{image},
		NodeSetup: k3sDataDir + nodeStep})
	t.Logf("cluster with k3s's layout up in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	k3sNodeMeta(t, ctx, c)

	// The page leaves the image to the chart's defaults; here it is the one just loaded,
	// named by the digest the nodes' containerd has for it (as a pin would name it).
	values["flannel"].(map[string]any)["image"] = map[string]any{"digest": loadedDigest(t, ctx, c.Nodes[0])}
	helmInstall(t, ctx, c, yamlOf(t, values))
	checkNodes(t, ctx, c)
	checkDaemonSet(t, ctx, c.Admin, "weft")
	for _, n := range c.Nodes {
		checkK3sFiles(t, n)
	}
	a := runPod(t, ctx, c, "pod-a", c.Nodes[0])
	b := runPod(t, ctx, c, "pod-b", c.Nodes[1])
	pingPod(t, ctx, c.Admin, a, b)
	pingPod(t, ctx, c.Admin, b, a)
	t.Logf("k3s layout: pods %s and %s ping each other; %v after start", a.ip, b.ip, time.Since(start).Round(time.Millisecond))
}

// docBlock is the fenced block that follows the line "<!-- name -->" in doc.
func docBlock(t *testing.T, doc, name string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "<!-- "+name+" -->\n")
	if !ok {
		t.Fatalf("%s: no block %q", k3sDoc, name)
	}
	fence, rest, ok := strings.Cut(rest, "\n")
	if !strings.HasPrefix(fence, "```") || !ok {
		t.Fatalf("%s: %q is not followed by a fenced block", k3sDoc, name)
	}
	body, _, ok := strings.Cut(rest, "```\n")
	if !ok {
		t.Fatalf("%s: block %q not closed", k3sDoc, name)
	}
	return body
}

// labValues parses a values block as helm does, checks that it names k3s's default
// cluster CIDR as podCidr and a flannel section, and returns it with the lab's overlay
// range as podCidr instead.
func labValues(t *testing.T, values string) chartutil.Values {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatalf("%s: %v", k3sDoc, err)
	}
	if got := v["podCidr"]; got != "10.42.0.0/16" {
		t.Fatalf("%s: podCidr %v, want k3s's default cluster-cidr 10.42.0.0/16", k3sDoc, got)
	}
	if _, ok := v["flannel"].(map[string]any); !ok {
		t.Fatalf("%s: values without a flannel section:\n%s", k3sDoc, values)
	}
	v["podCidr"] = kubecluster.ClusterCIDR
	return v
}

func yamlOf(t *testing.T, v chartutil.Values) string {
	t.Helper()
	out, err := v.YAML()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// loadedDigest is the digest of weft's image in node n's containerd (k8s.io), under
// the repository and tag of the chart's defaults.
func loadedDigest(t *testing.T, ctx context.Context, n *kubecluster.Node) string {
	t.Helper()
	def, err := chartutil.ReadValuesFile(filepath.Join("..", "deploy", "chart", "weft", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := def.Table("flannel.image")
	if err != nil {
		t.Fatal(err)
	}
	ref := fmt.Sprintf("%v:%v", img["repository"], img["tag"])
	out, err := n.Ctr(ctx, "-n", "k8s.io", "images", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line) // REF TYPE DIGEST ...
		if len(f) >= 3 && f[0] == ref && strings.HasPrefix(f[2], "sha256:") {
			return f[2]
		}
	}
	t.Fatalf("%s: weft's image %s not loaded:\n%s", n.Name, ref, out)
	return ""
}

// k3sNodeMeta puts on each node the annotations and label k3s's agent and cloud
// provider put there (pkg/cloudprovider), which weftd must leave alone.
func k3sNodeMeta(t *testing.T, ctx context.Context, c *kubecluster.Cluster) {
	t.Helper()
	await(t, ctx, "nodes registered", func() (bool, string) {
		nodes, err := c.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(nodes.Items) == len(c.Nodes), fmt.Sprintf("%d nodes", len(nodes.Items))
	})
	for _, n := range c.Nodes {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"node.kubernetes.io/instance-type":"k3s"},`+
			`"annotations":{"k3s.io/internal-ip":%q,"k3s.io/hostname":%q}}}`, n.Addr(), n.Name)
		if _, err := c.Admin.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// checkK3sFiles checks, through the node's own directories, that weft's plugin and
// CNI config are where containerd reads them, that the delegate plugins are the links
// the page's node step made into k3s's stable CNI directory, and that k3s's own CNI
// config directory stayed empty.
func checkK3sFiles(t *testing.T, n *kubecluster.Node) {
	t.Helper()
	opt := filepath.Join(n.Dir, "opt", "cni", "bin") // the node's /opt/cni/bin
	for _, p := range []string{"bridge", "host-local", "portmap", "loopback"} {
		got, err := os.Readlink(filepath.Join(opt, p))
		if want := "/var/lib/rancher/k3s/data/cni/" + p; err != nil || got != want {
			t.Errorf("%s: /opt/cni/bin/%s -> %q (%v), want a link to %s", n.Name, p, got, err, want)
		}
	}
	if fi, err := os.Lstat(filepath.Join(opt, "flannel")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("%s: /opt/cni/bin/flannel (weft's plugin): %v", n.Name, err)
	}
	// The node's /etc is an overlay: what the pods wrote is in its upper directory.
	if _, err := os.Stat(filepath.Join(n.Dir, "etc-up", "cni", "net.d", "10-flannel.conflist")); err != nil {
		t.Errorf("%s: /etc/cni/net.d/10-flannel.conflist: %v", n.Name, err)
	}
	k3sConf := filepath.Join(n.Dir, "varlib", "rancher", "k3s", "agent", "etc", "cni", "net.d")
	if ents, err := os.ReadDir(k3sConf); err != nil || len(ents) != 0 {
		t.Errorf("%s: /var/lib/rancher/k3s/agent/etc/cni/net.d: %d entries (%v), want it empty", n.Name, len(ents), err)
	}
}
