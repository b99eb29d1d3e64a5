package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/weftnet/weft/bench/kubeproc"
	"github.com/weftnet/weft/bench/kubetest"
	"github.com/weftnet/weft/bench/lab"
)

// KubeMaxNodes is how many peer Nodes fit: one /29 each in 198.18.0.0/16 below the
// measured daemons' own ones (198.18.255.0/24).
const KubeMaxNodes = 8000

// KubeNetConf is the net-conf.json of the Kubernetes scale runs: vxlan over the lab's
// overlay with /29 subnets (each Node's podCIDR).
const KubeNetConf = `{"Network":"198.18.0.0/16","SubnetLen":29,"Backend":{"Type":"vxlan"}}`

// KubeNodeCIDR is the podCIDR of peer Node i.
func KubeNodeCIDR(i int) string { return fmt.Sprintf("198.18.%d.%d/29", i/32, i%32*8) }

// KubeNodeName is the name of peer Node i.
func KubeNodeName(i int) string { return fmt.Sprintf("peer-%04d", i) }

// KubeNode is peer Node i as a kubelet and flannel leave it: labels, status with
// conditions and 40 images (about 10 KB), flannel's vxlan annotations and a /29
// podCIDR. Its status is written with UpdateStatus after the Node is created.
func KubeNode(i int) *corev1.Node {
	name := KubeNodeName(i)
	cidr := KubeNodeCIDR(i)
	ip := fmt.Sprintf("192.0.2.%d", 100+i%155)
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": "zone-a"},
			Annotations: map[string]string{
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"flannel.alpha.coreos.com/backend-type":                  "vxlan",
				"flannel.alpha.coreos.com/backend-data":                  fmt.Sprintf(`{"VNI":1,"VtepMAC":"02:5e:00:00:%02x:%02x"}`, i>>8&0xff, i&0xff),
				"flannel.alpha.coreos.com/public-ip":                     ip,
				"flannel.alpha.coreos.com/kube-subnet-manager":           "true",
			}},
		Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
	}
	st := corev1.NodeStatus{
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods: resource.MustParse("110")},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}},
		NodeInfo: corev1.NodeSystemInfo{KernelVersion: "6.1.0-18-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)",
			ContainerRuntimeVersion: "containerd://1.6.20", KubeletVersion: "v1.31.0", Architecture: "amd64", OperatingSystem: "linux"},
	}
	for _, c := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		st.Conditions = append(st.Conditions, corev1.NodeCondition{Type: c, Status: corev1.ConditionFalse,
			Reason: "KubeletHasSufficient" + string(c), Message: "kubelet has sufficient resources for " + string(c)})
	}
	for j := range 40 {
		st.Images = append(st.Images, corev1.ContainerImage{SizeBytes: int64(10_000_000 + j),
			Names: []string{fmt.Sprintf("registry.example/team/app-%d@sha256:%064x", j, j), fmt.Sprintf("registry.example/team/app-%d:v1.%d", j, j)}})
	}
	n.Status = st
	return n
}

// CreateKubeNode creates peer Node i and writes its status, as a kubelet registering.
func CreateKubeNode(ctx context.Context, cs kubernetes.Interface, i int) error {
	node := KubeNode(i)
	st := node.Status
	created, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create Node %s: %w", node.Name, err)
	}
	created.Status = st
	if _, err = cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of Node %s: %w", node.Name, err)
	}
	return nil
}

// CreateKubeNodes creates the peer Nodes of the given indices, 8 at a time.
func CreateKubeNodes(ctx context.Context, cs kubernetes.Interface, idx []int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := CreateKubeNode(ctx, cs, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel()
				}
			}
		})
	}
	for _, i := range idx {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// KubeEnv is a lab's kube-apiserver (on its router, against its etcd) with an admin
// client, kube-flannel's identity (deploy/rbac.yml, never admin) and a net-conf.json.
type KubeEnv struct {
	Lab    *lab.Lab
	Server *kubeproc.Server
	Admin  kubernetes.Interface // 500 QPS, to make Nodes fast
	ID     kubetest.Identity
	Conf   string // net-conf.json
	// AuditLog holds the API server's audit events of kube-flannel's ServiceAccount
	// (see KubeRequests).
	AuditLog string
	dir      string
}

// auditPolicy records, once each, the requests of kube-flannel's ServiceAccount.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["` + kubetest.User + `"]
- level: None
`

// NewKubeEnv starts the API server on l's router (its binary from repoRoot's
// test/kube, cached), applies deploy/rbac.yml and writes net-conf.json. Close removes
// what it made.
func NewKubeEnv(ctx context.Context, l *lab.Lab, repoRoot string) (e *KubeEnv, err error) {
	dir, err := os.MkdirTemp("", "weft-kubescale-")
	if err != nil {
		return nil, err
	}
	e = &KubeEnv{Lab: l, dir: dir, Conf: filepath.Join(dir, "net-conf.json"), AuditLog: filepath.Join(dir, "audit.log")}
	made := e // the error paths return nil, which must not hide what to remove
	defer func() {
		if err != nil {
			made.Close()
		}
	}()
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(e.Conf, []byte(KubeNetConf), 0o644); err != nil {
		return nil, err
	}
	apiBin, err := kubeproc.Binary(ctx, repoRoot)
	if err != nil {
		return nil, err
	}
	e.Server, err = kubeproc.Start(ctx, kubeproc.Options{Binary: apiBin, Etcd: l.Etcd().Endpoint(), Netns: l.Router().Name,
		Host: "192.0.2.1", Dial: l.Router().DialContext,
		Args: []string{"--audit-policy-file=" + policy, "--audit-log-path=" + e.AuditLog, "--audit-log-mode=blocking"}})
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", e.Server.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Dial, cfg.QPS, cfg.Burst = l.Router().DialContext, 500, 1000
	if e.Admin, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if e.ID, err = kubetest.NewIdentity(ctx, e.Admin, e.Server.URL, repoRoot, dir); err != nil {
		return nil, fmt.Errorf("kube-flannel's identity: %w", err)
	}
	return e, nil
}

// Close stops the API server and removes the files.
func (e *KubeEnv) Close() {
	if e.Server != nil {
		e.Server.Close()
	}
	_ = os.RemoveAll(e.dir)
}

// KubeDaemon is one daemon in Kubernetes mode on a host of its own.
type KubeDaemon struct {
	Host    *lab.Host
	D       *lab.Daemon
	Node    string // its own Node
	Pod     string
	Started time.Time
}

// KubeHealthzPort is where weftd serves /metrics (127.0.0.1, in its host's namespace).
const KubeHealthzPort = weftHealthzPort

// StartKubeDaemon starts one daemon on a fresh host named k<k> with its own Node
// (podCIDR 198.18.255.8k/29) and pod, as kube-flannel.yml would, with kube-flannel's
// identity.
func (e *KubeEnv) StartKubeDaemon(ctx context.Context, bin string, weft bool, k int) (*KubeDaemon, error) {
	h, err := e.Lab.AddHost(ctx, lab.HostSpec{Name: fmt.Sprintf("k%d", k)})
	if err != nil {
		return nil, err
	}
	kd := &KubeDaemon{Host: h, Node: "node-" + h.Name, Pod: "kube-flannel-ds-" + h.Name}
	own := fmt.Sprintf("198.18.255.%d/29", 8*k)
	// A real Node always has annotations; flanneld v0.28.10 panics on a Node without any.
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: kd.Node,
		Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
		Spec: corev1.NodeSpec{PodCIDR: own, PodCIDRs: []string{own}}}
	if _, err := e.Admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create Node %s: %w", kd.Node, err)
	}
	if err := kubetest.CreatePod(ctx, e.Admin, kd.Pod, kd.Node); err != nil {
		return nil, fmt.Errorf("create pod %s: %w", kd.Pod, err)
	}
	args := []string{"--kube-subnet-mgr", "--kubeconfig-file=" + e.ID.Kubeconfig, "--net-config-path=" + e.Conf}
	if weft {
		args = append(args, "--healthz-ip=127.0.0.1", fmt.Sprintf("--healthz-port=%d", KubeHealthzPort))
	}
	kd.Started = time.Now()
	kd.D, err = e.Lab.Start(ctx, h, lab.DaemonSpec{Binary: bin, Weft: weft, NoEtcd: true,
		Env:  []string{"POD_NAME=" + kd.Pod, "POD_NAMESPACE=" + kubetest.Namespace},
		Args: args})
	if err != nil {
		return nil, err
	}
	return kd, nil
}

// Remove stops the daemon and deletes its Node and pod, so that the next daemon does
// not see it as a peer.
func (e *KubeEnv) Remove(ctx context.Context, kd *KubeDaemon) error {
	var errs []error
	if kd.D != nil {
		errs = append(errs, kd.D.Stop())
	}
	errs = append(errs, e.Admin.CoreV1().Pods(kubetest.Namespace).Delete(ctx, kd.Pod, metav1.DeleteOptions{}),
		e.Admin.CoreV1().Nodes().Delete(ctx, kd.Node, metav1.DeleteOptions{}))
	return errors.Join(errs...)
}

// FlannelRoutes returns the destinations of the routes through flannel.1 on h.
func FlannelRoutes(ctx context.Context, h *lab.Host) map[string]bool {
	out, _ := h.NS.Run(ctx, "ip", "-4", "route", "show", "dev", "flannel.1")
	routes := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(line, "onlink") {
			routes[f[0]] = true
		}
	}
	return routes
}
