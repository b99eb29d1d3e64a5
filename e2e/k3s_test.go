package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/weftnet/weft/bench/kubecluster"
	"github.com/weftnet/weft/bench/testenv"
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
// put its CNI files, and pods on the two nodes pinging each other. Then the page's way
// back: helm uninstall (flannel's ServiceAccount goes with the release),
// weft-cleanup.yml run by its own ServiceAccount until no node keeps weft's rules,
// condition or annotations, and the page's node step, after which weft's CNI files
// are gone. RKE2's values on the page must equal k3s's: its layout is the default one
// of the other chart tests.
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
	cfg, _ := helmInstall(t, ctx, c, yamlOf(t, values))
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

	// The way back, as the page says: helm uninstall, weft-cleanup.yml, the node step.
	wayBackAfterHelm(t, ctx, c, cfg, "")
	back := docBlock(t, string(doc), "weft:k3s-back")
	for _, n := range c.Nodes {
		if out, err := nodeShell(ctx, t, n, back); err != nil {
			t.Fatalf("%s: %s's way back: %v\n%s", n.Name, k3sDoc, err, out)
		}
		for _, gone := range []string{"/opt/cni/bin/flannel", "/opt/cni/bin/bridge", "/opt/cni/bin/host-local",
			"/opt/cni/bin/portmap", "/opt/cni/bin/loopback", "/etc/cni/net.d/10-flannel.conflist"} {
			if _, err := os.Lstat(nodePath(t, n, gone)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s: %s still there after the way back (%v)", n.Name, gone, err)
			}
		}
	}
	t.Logf("k3s layout: back to no CNI of weft's, weft's rules and node marks gone; %v after start", time.Since(start).Round(time.Millisecond))
}

// wayBackAfterHelm runs the first steps of docs/k3s-rke2.md's ways back: helm
// uninstall weft, which takes flannel's ServiceAccount with the release (k3s's flannel
// and Canal do not make it again), then weft-cleanup.yml with its own (image: see
// runWeftCleanup), and checks that no node keeps weft's rules or marks.
func wayBackAfterHelm(t *testing.T, ctx context.Context, c *kubecluster.Cluster, cfg *action.Configuration, image string) {
	t.Helper()
	for _, n := range c.Nodes {
		if weftFirewall(t, ctx, n) == "" {
			t.Fatalf("node %s: no weft rules before the way back: the check after it would prove nothing", n.Name)
		}
	}
	u := action.NewUninstall(cfg)
	u.Wait, u.Timeout = true, 2*time.Minute
	if _, err := u.Run("weft"); err != nil {
		t.Fatalf("helm uninstall weft: %v", err)
	}
	awaitNoPods(t, ctx, c, "app=weft")
	if _, err := c.Admin.CoreV1().ServiceAccounts("kube-flannel").Get(ctx, "flannel", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("ServiceAccount flannel after helm uninstall: %v; want it gone with the release", err)
	}
	runWeftCleanup(t, ctx, c, image)
	checkWeftGone(t, ctx, c)
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

// canalConflist is a CNI config of the form Canal's install step writes on an RKE2 node
// (rke2-canal; Calico's canal.yaml writes the same shape): Calico's plugin, with
// host-local addresses from the node's podCIDR, then portmap and bandwidth. Written
// for this test. The node has no calico plugin, as after Canal is gone: a pod given
// this config gets no network, so pods that run prove the runtime took weft's.
const canalConflist = `{
  "name": "k8s-pod-network",
  "cniVersion": "0.3.1",
  "plugins": [
    {
      "type": "calico",
      "log_level": "info",
      "datastore_type": "kubernetes",
      "mtu": 1450,
      "ipam": {"type": "host-local", "subnet": "usePodCidr"},
      "policy": {"type": "k8s"},
      "kubernetes": {"kubeconfig": "/etc/cni/net.d/calico-kubeconfig"}
    },
    {"type": "portmap", "snat": true, "capabilities": {"portMappings": true}},
    {"type": "bandwidth", "capabilities": {"bandwidth": true}}
  ]
}
`

// rke2CanalLeftovers lays out an RKE2 node that ran Canal before cni: none: the
// plugins in /opt/cni/bin (Debian's standing in for those Canal's install step
// copied), Canal's config and its kubeconfig in /etc/cni/net.d.
const rke2CanalLeftovers = `mkdir -p /opt/cni/bin /etc/cni/net.d
for p in bridge host-local portmap loopback bandwidth; do cp /usr/lib/cni/$p /opt/cni/bin/$p; done
cat > /etc/cni/net.d/10-canal.conflist <<'WEFT_EOF'
` + canalConflist + `WEFT_EOF
echo 'apiVersion: v1' > /etc/cni/net.d/calico-kubeconfig
`

// TestRKE2Canal runs weft's chart with docs/k3s-rke2.md's RKE2 values on the real
// two-node cluster with each node laid out as an RKE2 node that ran Canal: Canal's
// 10-canal.conflist, which sorts before 10-flannel.conflist, is still in
// /etc/cni/net.d. weft's install-cni step (weft-install, from this tree: the image
// is weft's with it in place) must move it aside and say so in its log, so that the
// config containerd's CNI loader picks (libcni's ConfFiles, sorted: the first) is
// weft's, and pods on the two nodes ping each other. Then the page's way back: helm
// uninstall, weft-cleanup.yml as for k3s, the page's node step run on each node,
// after which the loader picks Canal's config again, byte for byte as it was.
func TestRKE2Canal(t *testing.T) {
	image := daemonSetPrereqs(t)
	doc, err := os.ReadFile(k3sDoc)
	if err != nil {
		t.Fatal(err)
	}
	values := labValues(t, docBlock(t, string(doc), "weft:rke2-values"))
	back := docBlock(t, string(doc), "weft:rke2-canal-back")
	treeImage := withTreeInstaller(t, image)

	start := time.Now()
	c := kubecluster.Start(t, kubecluster.Options{RepoRoot: "..", Images: []string{treeImage},
		NodeSetup: rke2CanalLeftovers})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, n := range c.Nodes {
		if got := cniPick(t, n); got != "10-canal.conflist" {
			t.Fatalf("%s: containerd's CNI config before weft is %q, want Canal's", n.Name, got)
		}
	}
	t.Logf("cluster with Canal's leftovers up in %v", time.Since(start).Round(time.Millisecond))

	values["flannel"].(map[string]any)["image"] = map[string]any{"repository": treeImageRepo, "tag": treeImageTag, "digest": ""}
	cfg, _ := helmInstall(t, ctx, c, yamlOf(t, values))
	checkNodes(t, ctx, c)
	checkDaemonSet(t, ctx, c.Admin, "weft")
	for _, n := range c.Nodes {
		if got := cniPick(t, n); got != "10-flannel.conflist" {
			t.Errorf("%s: containerd's CNI config with weft is %q, want 10-flannel.conflist", n.Name, got)
		}
		if got := nodeFile(t, n, "/etc/cni/net.d/10-canal.conflist.weft-backup"); got != canalConflist {
			t.Errorf("%s: Canal's config moved aside as %q, want it as it was", n.Name, got)
		}
	}
	pods, err := c.Admin.CoreV1().Pods("kube-flannel").List(ctx, metav1.ListOptions{LabelSelector: "app=weft"})
	if err != nil || len(pods.Items) != len(c.Nodes) {
		t.Fatalf("weft's pods: %v (%v)", pods, err)
	}
	for _, p := range pods.Items {
		log, err := c.Admin.CoreV1().Pods("kube-flannel").GetLogs(p.Name, &corev1.PodLogOptions{Container: "install-cni"}).DoRaw(ctx)
		want := "moved /etc/cni/net.d/10-canal.conflist aside to 10-canal.conflist.weft-backup"
		if err != nil || !strings.Contains(string(log), want) {
			t.Errorf("%s: install-cni's log lacks %q (%v):\n%s", p.Spec.NodeName, want, err, log)
		} else {
			t.Logf("%s install-cni:\n%s", p.Spec.NodeName, strings.TrimSpace(string(log)))
		}
	}
	a := runPod(t, ctx, c, "pod-a", c.Nodes[0])
	b := runPod(t, ctx, c, "pod-b", c.Nodes[1])
	pingPod(t, ctx, c.Admin, a, b)
	pingPod(t, ctx, c.Admin, b, a)
	t.Logf("RKE2 after Canal: pods %s and %s ping each other; %v after start", a.ip, b.ip, time.Since(start).Round(time.Millisecond))

	// The way back: helm uninstall, weft-cleanup.yml (on the image the nodes have),
	// then the page's node step on every node.
	wayBackAfterHelm(t, ctx, c, cfg, treeImageRepo+":"+treeImageTag)
	for _, n := range c.Nodes {
		if out, err := nodeShell(ctx, t, n, back); err != nil {
			t.Fatalf("%s: %s's way back: %v\n%s", n.Name, k3sDoc, err, out)
		}
		if got := cniPick(t, n); got != "10-canal.conflist" {
			t.Errorf("%s: containerd's CNI config after the way back is %q, want Canal's", n.Name, got)
		}
		if got := nodeFile(t, n, "/etc/cni/net.d/10-canal.conflist"); got != canalConflist {
			t.Errorf("%s: Canal's config after the way back: %q, want it as it was", n.Name, got)
		}
		for _, gone := range []string{"/etc/cni/net.d/10-canal.conflist.weft-backup", "/etc/cni/net.d/10-flannel.conflist", "/opt/cni/bin/flannel"} {
			if _, err := os.Lstat(nodePath(t, n, gone)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s: %s still there after the way back (%v)", n.Name, gone, err)
			}
		}
	}
}

// The image TestRKE2Canal runs: weft's, with weft-install built from this tree.
const (
	treeImageRepo = "registry.weft.test/weftd"
	treeImageTag  = "tree-install"
)

// withTreeInstaller writes weft's image with /opt/bin/weft-install replaced by one
// built from this tree (static, as the image's) and returns the archive.
func withTreeInstaller(t *testing.T, image string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "weft-install")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/weft-install")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build weft-install: %v\n%s", err, out)
	}
	tar := filepath.Join(dir, "weftd-tree.tar")
	if err := kubecluster.WriteImageOver(tar, image, treeImageRepo+":"+treeImageTag, map[string]string{"/opt/bin/weft-install": bin}); err != nil {
		t.Fatal(err)
	}
	return tar
}

// nodeRoot is /proc/PID/root of node n's containerd: its files as containerd sees
// them, through the node's own mount namespace.
func nodeRoot(t *testing.T, n *kubecluster.Node) string {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	want := "containerd\x00--config\x00" + filepath.Join(n.Dir, "containerd.toml") + "\x00"
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && string(b) == want {
			return filepath.Join(filepath.Dir(p), "root")
		}
	}
	t.Fatalf("%s: no containerd process", n.Name)
	return ""
}

func nodePath(t *testing.T, n *kubecluster.Node, path string) string {
	return filepath.Join(nodeRoot(t, n), path)
}

// nodeFile is the content of a file of node n ("" if it is missing).
func nodeFile(t *testing.T, n *kubecluster.Node, path string) string {
	t.Helper()
	b, err := os.ReadFile(nodePath(t, n, path))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// cniPick is the CNI config containerd (go-cni, max one network) loads from node n's
// /etc/cni/net.d: the first of libcni's ConfFiles with go-cni's extensions, sorted.
func cniPick(t *testing.T, n *kubecluster.Node) string {
	t.Helper()
	files, err := libcni.ConfFiles(nodePath(t, n, "/etc/cni/net.d"), []string{".conf", ".conflist", ".json"})
	if err != nil {
		t.Fatalf("%s: %v", n.Name, err)
	}
	if len(files) == 0 {
		return ""
	}
	sort.Strings(files)
	return filepath.Base(files[0])
}

// nodeShell runs script (sh -e) in node n's mount namespace, as root on the node.
func nodeShell(ctx context.Context, t *testing.T, n *kubecluster.Node, script string) (string, error) {
	t.Helper()
	ns := filepath.Join(filepath.Dir(nodeRoot(t, n)), "ns", "mnt")
	out, err := exec.CommandContext(ctx, "nsenter", "--mount="+ns, "--", "sh", "-ec", script).CombinedOutput()
	return string(out), err
}

// TestK3sCarryOver renders weft's chart (as helm template does) with the values block
// docs/k3s-rke2.md gives for k3s's --flannel-iface and --node-ip, and checks that the
// DaemonSet runs weftd with exactly those arguments (the chart's health port after
// them), and that weftd (WEFT_BIN/weftd) accepts them: it checks them with --version,
// which exits once the flags are read and checked.
func TestK3sCarryOver(t *testing.T) {
	weftd := filepath.Join(os.Getenv("WEFT_BIN"), "weftd")
	_, err := os.Stat(weftd)
	testenv.Need(t, err == nil, "WEFT_BIN/weftd (make build; set WEFT_BIN)")
	doc, err := os.ReadFile(k3sDoc)
	if err != nil {
		t.Fatal(err)
	}
	values := labValues(t, docBlock(t, string(doc), "weft:k3s-iface-values"))
	var want []string
	for _, a := range values["flannel"].(map[string]any)["args"].([]any) {
		want = append(want, a.(string))
	}
	for _, flag := range []string{"--ip-masq", "--kube-subnet-mgr", "--iface=", "--iface-can-reach="} {
		if !slices.ContainsFunc(want, func(a string) bool { return strings.HasPrefix(a, flag) }) {
			t.Errorf("%s: the carried-over args %q lack %s", k3sDoc, want, flag)
		}
	}
	ch, err := loader.Load(filepath.Join("..", "deploy", "chart", "weft"))
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = "weft", "kube-flannel"
	rel, err := inst.Run(ch, values.AsMap())
	if err != nil {
		t.Fatalf("render the chart with %s's values: %v", k3sDoc, err)
	}
	var got []string
	for _, doc := range strings.Split(rel.Manifest, "\n---") {
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal([]byte(doc), &ds); err != nil || ds.Kind != "DaemonSet" {
			continue
		}
		got = ds.Spec.Template.Spec.Containers[0].Args
	}
	if wantAll := append(slices.Clone(want), "--healthz-port=8081"); !slices.Equal(got, wantAll) {
		t.Errorf("weftd's args in the rendered DaemonSet:\n%q\nwant\n%q", got, wantAll)
	}
	// With the DaemonSet's environment (its pod), which --kube-subnet-mgr needs.
	cmd := exec.Command(weftd, append(slices.Clone(want), "--version")...)
	cmd.Env = append(os.Environ(), "POD_NAME=weft-test", "POD_NAMESPACE=kube-flannel")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("weftd %q --version: %v\n%s", want, err, out)
	}
	t.Logf("chart renders weftd %q; weftd accepts them (%s)", got, strings.TrimSpace(string(out)))
}
