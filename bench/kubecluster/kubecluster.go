// Package kubecluster runs a real Kubernetes cluster on this machine for weft's
// end-to-end tests: the lab's router namespace holds etcd, kube-apiserver,
// kube-controller-manager (which allocates the nodes' podCIDRs) and kube-scheduler;
// each node is a lab host namespace with its own containerd (Debian's) and kubelet,
// all of Kubernetes built from its Go module by test/kube (bench/kubeproc).
//
// A node never changes the machine: containerd and the kubelet run in the node's
// network namespace and in a private mount namespace of the node, where per-node
// directories cover /run, /var/lib, /var/log and /opt, /etc is an overlay, and files
// cover the sysctls the kubelet writes. Each node has its own cgroup root in every
// cgroup v1 hierarchy (two kubelets sharing one would kill each other's pods), and the
// node's own processes (containerd, its shims, the kubelet) sit in a second cgroup, so
// that Close finds and stops everything the node started.
//
// The harness plays kube-proxy for the one Service pods on the host network need:
// each node DNATs the kubernetes Service (198.18.254.1:443) to the API server.
package kubecluster

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/weftnet/weft/bench/kubeproc"
	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/testenv"
)

// Addresses of the cluster. The service range is kubeproc's; the controller manager
// keeps it out of the podCIDRs it allocates from ClusterCIDR.
const (
	ClusterCIDR  = "198.18.0.0/16"
	ServiceCIDR  = "198.18.254.0/24"
	APIServiceIP = "198.18.254.1" // the kubernetes Service
	apiHost      = "192.0.2.1"    // the router, on LAN1
	apiPort      = 6443
	// PauseImage is the sandbox image every node's containerd uses; it is also the
	// test pods' image (bench/kubecluster/testpod).
	PauseImage = "registry.weft.test/testpod:1"
)

// Options describe a cluster.
type Options struct {
	RepoRoot string
	Nodes    int      // default 2
	Images   []string // image archives imported into every node's containerd (k8s.io)
	// LegacyIPTables names the nodes ("node1") whose firewall is iptables-legacy, as on
	// a host where update-alternatives picks it: their containerd (so the CNI plugins)
	// and kubelet find iptables, ip6tables and their -save and -restore as the -legacy
	// tools first on PATH, so the kubelet's hint chains go there, and the harness's
	// DNAT for the kubernetes Service goes there too. The other nodes keep Debian's
	// default, iptables-nft. Legacy tables live in the node's network namespace and go
	// with it when the cluster closes.
	LegacyIPTables []string
	// NodeSetup is shell run (sh -e) in each node's mount namespace before containerd
	// starts, where /opt, /var/lib, /run and /etc are the node's own: it lays out a
	// distribution's directories (e2e/k3s_test.go: k3s's). With NodeSetup set the
	// delegate CNI plugins are not copied into /opt/cni/bin; NodeSetup puts there what
	// containerd (bin_dir /opt/cni/bin) and the flannel plugin need.
	NodeSetup string
}

// Cluster is a running cluster.
type Cluster struct {
	Lab *lab.Lab
	API *kubeproc.Server
	// Admin is the test's own client (system:masters); weftd never uses it.
	Admin  kubernetes.Interface
	Config *rest.Config
	Nodes  []*Node
	dir    string
	procs  []*proc
}

// Node is one node: a lab host running containerd and a kubelet.
type Node struct {
	Name   string
	Host   *lab.Host
	Dir    string
	Sock   string // containerd's socket
	cgroup string // the kubelet's cgroupRoot, without the leading slash
	holder *proc  // keeps the node's mount namespace
	procs  []*proc

	// LegacyIPTables: the node's firewall is iptables-legacy (Options.LegacyIPTables).
	LegacyIPTables bool
	setup          string // Options.NodeSetup
}

// Start builds the binaries (cached), the lab and the cluster; t.Cleanup removes it
// all, on failure too. Start fails t on any error.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	ctx := context.Background()
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	bin, err := kubeproc.Binary(ctx, o.RepoRoot)
	if err != nil {
		t.Fatal(err)
	}
	// A short directory: containerd's socket path must fit in sun_path.
	dir, err := os.MkdirTemp("", "wkc-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{dir: dir}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	pauseTar, err := pauseImage(ctx, o.RepoRoot, dir)
	if err != nil {
		t.Fatal(err)
	}
	var hosts []lab.HostSpec
	for i := 1; i <= o.Nodes; i++ {
		hosts = append(hosts, lab.HostSpec{Name: fmt.Sprintf("node%d", i)})
	}
	l, err := lab.New(ctx, lab.Spec{Prefix: "wk", Hosts: hosts, StateFile: filepath.Join(dir, "lab.json")}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	c.Lab = l
	// Closing the lab's namespaces ends every process of the cluster (all run in them).
	testenv.OnInterrupt(t, "kube cluster", func() error { return errors.Join(l.Close(), os.RemoveAll(dir)) })
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("lab: %v", err)
		}
	})

	kcmToken, schedToken := token(), token()
	nodeTokens := map[string]string{}
	users := []kubeproc.User{
		{Token: kcmToken, Name: "system:kube-controller-manager"},
		{Token: schedToken, Name: "system:kube-scheduler"},
	}
	for _, h := range hosts {
		nodeTokens[h.Name] = token()
		users = append(users, kubeproc.User{Token: nodeTokens[h.Name], Name: "system:node:" + h.Name, Groups: []string{"system:nodes"}})
	}
	c.startAPI(ctx, t, bin, users)
	if err := c.startControlPlane(bin, kcmToken, schedToken); err != nil {
		t.Fatal(err)
	}

	for i, hs := range hosts {
		n := &Node{Name: hs.Name, Host: l.Host(hs.Name), Dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			cgroup: "weft-" + strings.ReplaceAll(filepath.Base(dir), "wkc-", "") + "-" + hs.Name}
		n.Sock = filepath.Join(n.Dir, "c.sock")
		n.LegacyIPTables = o.isLegacy(n.Name)
		n.setup = o.NodeSetup
		c.Nodes = append(c.Nodes, n)
		if err := c.startNode(ctx, n, bin, nodeTokens[n.Name], append([]string{pauseTar}, o.Images...)); err != nil {
			t.Fatalf("node %s: %v", n.Name, err)
		}
	}
	return c
}

// pauseImage builds the test pod binary into dir and writes it as PauseImage, an
// image tarball for the nodes to import; it returns the tarball's path.
func pauseImage(ctx context.Context, repoRoot, dir string) (string, error) {
	testpod := filepath.Join(dir, "testpod")
	if err := buildTestpod(ctx, repoRoot, testpod); err != nil {
		return "", err
	}
	pauseTar := filepath.Join(dir, "testpod.tar")
	if err := WriteImage(pauseTar, PauseImage, testpod); err != nil {
		return "", err
	}
	return pauseTar, nil
}

// startAPI starts the API server in the router namespace with users' tokens and makes
// the admin client; t.Cleanup stops it, and the nodes and control plane before.
func (c *Cluster) startAPI(ctx context.Context, t testing.TB, bin string, users []kubeproc.User) {
	t.Helper()
	l := c.Lab
	api, err := kubeproc.Start(ctx, kubeproc.Options{
		Binary: bin, Etcd: lab.EtcdEndpoint, Netns: l.Router().Name, Host: apiHost, Port: apiPort,
		Dial: l.Router().DialContext, Authorization: "Node,RBAC", Users: users,
		Args: []string{"--kubelet-preferred-address-types=InternalIP,Hostname", "--allow-privileged=true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	c.API = api
	t.Cleanup(api.Close)
	c.Config = &rest.Config{
		Host: api.URL, BearerToken: api.Token, Dial: l.Router().DialContext,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 50, Burst: 100,
	}
	if c.Admin, err = kubernetes.NewForConfig(c.Config); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop(t) })
}

// startControlPlane starts the controller manager and the scheduler in the router
// namespace.
func (c *Cluster) startControlPlane(bin, kcmToken, schedToken string) error {
	dir, l, api := c.dir, c.Lab, c.API
	// The CA of the API server's certificate, which the controller manager publishes
	// to every namespace as kube-root-ca.crt (in-cluster clients verify with it).
	caFile := filepath.Join(dir, "ca.crt")
	if err := caOnly(api.CertFile, caFile); err != nil {
		return err
	}
	kcmConfig, err := c.kubeconfig("kcm", kcmToken)
	if err != nil {
		return err
	}
	schedConfig, err := c.kubeconfig("scheduler", schedToken)
	if err != nil {
		return err
	}
	router := []string{"ip", "netns", "exec", l.Router().Name}
	kcm := append(append([]string{}, router...), bin, "kube-controller-manager",
		"--kubeconfig="+kcmConfig,
		"--allocate-node-cidrs=true", "--cluster-cidr="+ClusterCIDR, "--node-cidr-mask-size=24",
		"--service-cluster-ip-range="+ServiceCIDR,
		"--use-service-account-credentials=true",
		"--root-ca-file="+caFile, "--service-account-private-key-file="+api.KeyFile,
		"--leader-elect=false", "--bind-address=127.0.0.1")
	sched := append(append([]string{}, router...), bin, "kube-scheduler",
		"--kubeconfig="+schedConfig,
		"--leader-elect=false", "--bind-address=127.0.0.1")
	for name, args := range map[string][]string{"kube-controller-manager": kcm, "kube-scheduler": sched} {
		p, err := startProc(name, filepath.Join(dir, name+".log"), args)
		if err != nil {
			return err
		}
		c.procs = append(c.procs, p)
	}
	return nil
}

// stop ends the nodes and the control plane (the lab and the API server have their
// own cleanups).
func (c *Cluster) stop(t testing.TB) {
	for _, n := range c.Nodes {
		if err := n.stop(); err != nil {
			t.Errorf("node %s: %v", n.Name, err)
		}
		if t.Failed() {
			for _, p := range n.procs {
				t.Logf("%s %s log (tail):\n%s", n.Name, p.name, p.tail(30))
			}
		}
	}
	for _, p := range c.procs {
		p.stop()
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", p.name, p.tail(30))
		}
	}
}

func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// kubeconfig writes a kubeconfig for a component with its token.
func (c *Cluster) kubeconfig(name, tok string) (string, error) {
	path := filepath.Join(c.dir, name+".kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: https://%s:%d
    insecure-skip-tls-verify: true
users:
- name: %[3]s
  user:
    token: %[4]s
contexts:
- name: lab
  context:
    cluster: lab
    user: %[3]s
current-context: lab
`, apiHost, apiPort, name, tok)
	return path, os.WriteFile(path, []byte(kc), 0o600)
}

// buildTestpod builds the testpod binary (static) as bin.
func buildTestpod(ctx context.Context, repoRoot, bin string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", bin, "./bench/kubecluster/testpod")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build testpod: %w: %s", err, b)
	}
	return nil
}

// Log is the log of one of the node's processes ("containerd", "kubelet").
func (n *Node) Log(name string) string {
	for _, p := range n.procs {
		if p.name == name {
			return p.tail(200)
		}
	}
	return ""
}

// Addr is the node's address (its InternalIP).
func (n *Node) Addr() netip.Addr { return n.Host.Addr }

// cgroupHierarchies are the mounted cgroup v1 hierarchies.
func cgroupHierarchies() ([]string, error) {
	ents, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join("/sys/fs/cgroup", e.Name())
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil && e.IsDir() {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup v1 hierarchies under /sys/fs/cgroup")
	}
	return out, nil
}

// makeCgroups makes name in every hierarchy (cpuset with its parent's CPUs and memory
// nodes, which a new cpuset lacks).
func makeCgroups(name string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		p := filepath.Join(h, name)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(p, f), v, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(p, f), err)
				}
			}
		}
	}
	return nil
}

// joinCgroups moves pid into name in every hierarchy.
func joinCgroups(name string, pid int) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		if err := os.WriteFile(filepath.Join(h, name, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("join %s: %w", filepath.Join(h, name), err)
		}
	}
	return nil
}

// cgroupPids lists the processes in name and below, in the pids hierarchy.
func cgroupPids(name string) []int {
	var pids []int
	_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup/pids", name), func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		f, err := os.Open(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		defer f.Close()
		s := bufio.NewScanner(f)
		for s.Scan() {
			if pid, err := strconv.Atoi(s.Text()); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// removeCgroups kills what is left in name and removes it, deepest first, in every
// hierarchy.
func removeCgroups(name string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		pids := cgroupPids(name)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes %v survive SIGKILL", name, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond) // the kernel reaps them; there is no event to await here
	}
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		root := filepath.Join(h, name)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := rmdirRetry(dirs[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry removes a cgroup, retrying while the kernel still counts a dying task.
func rmdirRetry(p string) error {
	var err error
	for i := 0; i < 100; i++ {
		if err = syscall.Rmdir(p); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("rmdir %s: %w", p, err)
}

// caOnly writes the CA certificates of the PEM file in to out.
func caOnly(in, out string) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var cas []byte
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			break
		}
		if cert, err := x509.ParseCertificate(b.Bytes); err == nil && cert.IsCA {
			cas = append(cas, pem.EncodeToMemory(b)...)
		}
	}
	if len(cas) == 0 {
		return fmt.Errorf("%s: no CA certificate", in)
	}
	return os.WriteFile(out, cas, 0o644)
}

// ControlPlaneMemory is the peak resident memory (VmHWM) of kube-apiserver,
// kube-controller-manager and kube-scheduler, by name.
func (c *Cluster) ControlPlaneMemory() map[string]uint64 {
	pids := map[string]int{"kube-apiserver": c.API.Pid()}
	for _, p := range c.procs {
		pids[p.name] = p.cmd.Process.Pid
	}
	out := map[string]uint64{}
	for name, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			var kb uint64
			if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &kb); err == nil {
				out[name] = kb << 10
			}
		}
	}
	return out
}

// MaxMemory is the peak memory (cgroup v1 max_usage_in_bytes) of the node's cgroups:
// its own processes and its pods.
func (n *Node) MaxMemory() (uint64, error) {
	var sum uint64
	for _, g := range []string{n.cgroup, n.cgroup + "-sys"} {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", g, "memory.max_usage_in_bytes"))
		if err != nil {
			return 0, err
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// readLine reads the first line r writes (the holder's "ready").
func readLine(r io.Reader) (string, error) {
	s := bufio.NewScanner(r)
	if s.Scan() {
		return s.Text(), nil
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	return "", io.EOF
}
