package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/weftnet/weft/bench/kubeproc"
	"github.com/weftnet/weft/bench/kubetest"
	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
)

// kubeCluster runs a real kube-apiserver in the router namespace (192.0.2.1:6443) on
// the lab's etcd and returns an admin client that reaches it (for the test's setup),
// and the identity daemons run as: kube-flannel's ServiceAccount and ClusterRole
// (deploy/rbac.yml), never cluster admin.
func kubeCluster(t *testing.T, c *cluster) (*kubeproc.Server, kubernetes.Interface, kubetest.Identity) {
	t.Helper()
	return kubeAPI(t, c.router, c.etcd.Endpoint())
}

// kubeAPI runs a real kube-apiserver in router (192.0.2.1:6443) on the etcd at
// endpoint, and returns it, an admin client for the test's setup and kube-flannel's
// identity (deploy/rbac.yml) for the daemons. Everything stops at the test's cleanup.
func kubeAPI(t *testing.T, router *netns.NS, endpoint string) (*kubeproc.Server, kubernetes.Interface, kubetest.Identity) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs kube-apiserver")
	}
	testenv.NeedTools(t, "go")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	srv, cs, err := startKubeAPI(ctx, router, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv, cs, kubetest.Flannel(t, cs, srv.URL, "..")
}

// startKubeAPI is kubeAPI's start, safe to call from any goroutine: the server and
// an admin client, or an error (with nothing left running). The caller closes srv.
func startKubeAPI(ctx context.Context, router *netns.NS, endpoint string) (*kubeproc.Server, kubernetes.Interface, error) {
	bin, err := kubeproc.Binary(ctx, "..")
	if err != nil {
		return nil, nil, err
	}
	srv, err := kubeproc.Start(ctx, kubeproc.Options{Binary: bin, Etcd: endpoint, Netns: router.Name,
		Host: "192.0.2.1", Dial: router.DialContext})
	if err != nil {
		return nil, nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", srv.Kubeconfig)
	if err == nil {
		cfg.Dial = router.DialContext
		var cs kubernetes.Interface
		if cs, err = kubernetes.NewForConfig(cfg); err == nil {
			return srv, cs, nil
		}
	}
	srv.Close()
	return nil, nil, fmt.Errorf("admin client: %w", err)
}

// startKube runs weftd on h in Kubernetes mode as kube-flannel.yml would: as the
// flannel ServiceAccount, finding its node from its pod (POD_NAME, POD_NAMESPACE;
// the pod object is made here, on node "node-<h.name>").
func (c *cluster) startKube(h *host, cs kubernetes.Interface, id kubetest.Identity, conf string, extra ...string) {
	c.t.Helper()
	pod := "kube-flannel-ds-" + h.name
	kubetest.Pod(c.t, cs, pod, "node-"+h.name)
	c.run(h, lab.DaemonSpec{Binary: c.bin, Weft: true, NoEtcd: true,
		Env: []string{"POD_NAME=" + pod, "POD_NAMESPACE=" + kubetest.Namespace},
		Args: append([]string{"--healthz-ip=127.0.0.1", "--healthz-port=8475",
			"--kube-subnet-mgr", "--kubeconfig-file=" + id.Kubeconfig, "--net-config-path=" + conf,
		}, extra...)})
}

// probe asks weftd's health endpoint on h for path (/healthz, /readyz).
func probe(h *host, path string) (int, string, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: h.ns.DialContext}, Timeout: 2 * time.Second}
	resp, err := hc.Get("http://127.0.0.1:8475" + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body)), err
}

// readyz waits until /readyz on h answers code with a body containing want.
func readyz(t *testing.T, h *host, code int, want string) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		got, body, err := probe(h, "/readyz")
		if err != nil {
			return err
		}
		if got != code || !strings.Contains(body, want) {
			return fmt.Errorf("%s /readyz: %d %q, want %d with %q", h.name, got, body, code, want)
		}
		return nil
	})
}

// TestKubeSubnetManager: weftd --kube-subnet-mgr, run as kube-flannel runs flanneld
// (its ServiceAccount and ClusterRole, node from POD_NAME/POD_NAMESPACE), takes each
// node's podCIDR and carries pod traffic between nodes on udp and vxlan; it is live and
// ready on kube-flannel's probes; a deleted node's subnet stops being routed and its
// daemon is no longer ready.
func TestKubeSubnetManager(t *testing.T) {
	for _, backend := range []string{"udp", "vxlan"} {
		t.Run(backend, func(t *testing.T) {
			c := newCluster(t, "v3")
			_, cs, id := kubeCluster(t, c)
			conf := netConf(t, backend)
			hosts := map[string]*host{}
			cidrs := map[string]string{"a": "198.18.10.0/24", "c": "198.18.30.0/24"}
			for name, lan := range map[string]string{"a": "lan1", "c": "lan2"} {
				createNode(t, cs, "node-"+name, cidrs[name])
				h := c.addHost(name, lan)
				hosts[name] = h
				c.startKube(h, cs, id, conf)
			}
			pods := c.podsOnPodCIDRs(hosts, cidrs)
			meshPing(c, hosts, pods, "a", "c")
			for _, h := range hosts {
				readyz(t, h, http.StatusOK, "ok")
				if code, body, err := probe(h, "/healthz"); err != nil || code != http.StatusOK {
					t.Fatalf("%s /healthz: %d %q %v", h.name, code, body, err)
				}
			}

			n := getNode(t, cs, "node-a")
			if n.Annotations["flannel.alpha.coreos.com/public-ip"] != hosts["a"].ip ||
				n.Annotations["flannel.alpha.coreos.com/backend-type"] != backend ||
				n.Annotations["flannel.alpha.coreos.com/kube-subnet-manager"] != "true" {
				t.Fatalf("node-a annotations: %v", n.Annotations)
			}

			// Deleting node c removes its subnet from a's data path.
			if err := cs.CoreV1().Nodes().Delete(context.Background(), "node-c", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			eventually(t, 20*time.Second, func() error {
				if _, err := hosts["a"].pod.Run(context.Background(), "ping", "-c", "1", "-W", "1", pods["c"]); err == nil {
					return fmt.Errorf("pod c still reachable after its node was deleted")
				}
				return nil
			})
			readyz(t, hosts["c"], http.StatusServiceUnavailable, "node node-c is gone")
		})
	}
}

// netConf writes a net-conf.json for backend, as the kube-flannel ConfigMap would.
func netConf(t *testing.T, backend string) string {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "net-conf.json")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`{"Network":"198.18.0.0/16","Backend":{"Type":%q}}`, backend)), 0o644); err != nil {
		t.Fatal(err)
	}
	return conf
}

// podsOnPodCIDRs waits until the daemon on each host wrote subnet.env with the podCIDR
// of its node, attaches a pod on each and returns the pods' addresses.
func (c *cluster) podsOnPodCIDRs(hosts map[string]*host, cidrs map[string]string) map[string]string {
	c.t.Helper()
	pods := map[string]string{}
	for name, h := range hosts {
		env := c.waitSubnetEnv(h)
		if env.Subnet.String() != cidrs[name] {
			c.t.Fatalf("%s: subnet %v, want its podCIDR %s", name, env.Subnet, cidrs[name])
		}
		pods[name] = c.attachPod(h, env)
	}
	return pods
}

// createNode adds a node with podCIDR cidr, as the node IPAM controller would, and an
// annotation, as the kubelet would (flanneld v0.28 panics on a node without any).
func createNode(t *testing.T, cs kubernetes.Interface, name, cidr string) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
		Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}
	if _, err := cs.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func getNode(t *testing.T, cs kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKubeFlannelOptions: what kube-flannel deployments set besides the defaults, on
// vxlan, as the flannel ServiceAccount. --kube-annotation-prefix=example.com/flannel
// gives flanneld's keys (example.com/flannel-public-ip); node a's public-ip-overwrite
// is what peers send to; node c's node-public-ip is c's public address. /readyz says
// why it is not ready: before c's node has a podCIDR, and after the API server is gone
// (while pods still reach each other).
func TestKubeFlannelOptions(t *testing.T) {
	c := newCluster(t, "v3")
	srv, cs, id := kubeCluster(t, c)
	conf := netConf(t, "vxlan")
	const p = "example.com/flannel-"
	a, cc := c.addHost("a", "lan1"), c.addHost("c", "lan2")
	hosts := map[string]*host{"a": a, "c": cc}
	// Second addresses: a is reached at the overwrite, c publishes its node-public-ip.
	c.sh(a.ns, "ip addr add 192.0.2.200/24 dev eth0")
	c.sh(cc.ns, "ip addr add 198.51.100.200/24 dev eth0")
	node := func(name, cidr string, ann map[string]string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}}
		if cidr != "" {
			n.Spec.PodCIDR, n.Spec.PodCIDRs = cidr, []string{cidr}
		}
		if _, err := cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	node("node-a", "198.18.10.0/24", map[string]string{p + "public-ip-overwrite": "192.0.2.200"})
	node("node-c", "", map[string]string{p + "node-public-ip": "198.51.100.200"})
	for _, h := range hosts {
		c.startKube(h, cs, id, conf, "--kube-annotation-prefix=example.com/flannel")
	}
	readyz(t, cc, http.StatusServiceUnavailable, "no lease yet: waiting for our node's podCIDR")

	n := getNode(t, cs, "node-c")
	n.Spec.PodCIDR, n.Spec.PodCIDRs = "198.18.30.0/24", []string{"198.18.30.0/24"}
	if _, err := cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := c.podsOnPodCIDRs(hosts, map[string]string{"a": "198.18.10.0/24", "c": "198.18.30.0/24"})
	meshPing(c, hosts, pods, "a", "c")
	for _, h := range hosts {
		readyz(t, h, http.StatusOK, "ok")
	}
	for name, ip := range map[string]string{"node-a": "192.0.2.200", "node-c": "198.51.100.200"} {
		n := getNode(t, cs, name)
		if n.Annotations[p+"public-ip"] != ip || n.Annotations[p+"backend-type"] != "vxlan" || n.Annotations[p+"kube-subnet-manager"] != "true" {
			t.Errorf("%s: annotations %v, want %spublic-ip=%s", name, n.Annotations, p, ip)
		}
		for k := range n.Annotations {
			if strings.HasPrefix(k, "example.com/flannel/") || strings.HasPrefix(k, "flannel.alpha.coreos.com/") {
				t.Errorf("%s: annotation %s under the wrong prefix", name, k)
			}
		}
	}
	// Each sends its VXLAN packets to the address the other published.
	for h, dst := range map[*host]string{a: "198.51.100.200", cc: "192.0.2.200"} {
		if out := c.sh(h.ns, "bridge fdb show dev flannel.1"); !strings.Contains(out, "dst "+dst+" ") {
			t.Errorf("%s: fdb has no entry to %s:\n%s", h.name, dst, out)
		}
	}

	srv.Close()
	for _, h := range hosts {
		readyz(t, h, http.StatusServiceUnavailable, "node watch failing")
	}
	meshPing(c, hosts, pods, "a", "c")
}
