package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/weftnet/weft/internal/kubeproc"
	"github.com/weftnet/weft/internal/testenv"
)

// kubeCluster runs a real kube-apiserver in the router namespace (192.0.2.1:6443) on
// the lab's etcd and returns a client that reaches it.
func kubeCluster(t *testing.T, c *cluster) (*kubeproc.Server, kubernetes.Interface) {
	t.Helper()
	testenv.NeedTools(t, "go")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	bin, err := kubeproc.Binary(ctx, "..")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := kubeproc.Start(ctx, kubeproc.Options{Binary: bin, Etcd: c.etcd.Endpoint(), Netns: c.router.Name,
		Host: "192.0.2.1", Dial: c.router.DialContext})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cfg, err := clientcmd.BuildConfigFromFlags("", srv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dial = c.router.DialContext
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv, cs
}

// TestKubeSubnetManager: weftd --kube-subnet-mgr takes each node's podCIDR and
// carries pod traffic between nodes on udp and vxlan; a deleted node's subnet stops
// being routed.
func TestKubeSubnetManager(t *testing.T) {
	for _, backend := range []string{"udp", "vxlan"} {
		t.Run(backend, func(t *testing.T) {
			c := newCluster(t, "v3")
			srv, cs := kubeCluster(t, c)
			conf := netConf(t, backend)
			hosts := map[string]*host{}
			cidrs := map[string]string{"a": "198.18.10.0/24", "c": "198.18.30.0/24"}
			for name, lan := range map[string]string{"a": "lan1", "c": "lan2"} {
				createNode(t, cs, "node-"+name, cidrs[name])
				h := c.addHost(name, lan)
				hosts[name] = h
				c.startWith(h, "--kube-subnet-mgr", "--node-name=node-"+name, "--kubeconfig-file="+srv.Kubeconfig, "--net-config-path="+conf)
			}
			pods := c.podsOnPodCIDRs(hosts, cidrs)
			meshPing(c, hosts, pods, "a", "c")

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
