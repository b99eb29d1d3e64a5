package kube

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/weftnet/weft/lease"
)

// fatNode is a Node as a kubelet leaves it in a real cluster: labels, other
// components' annotations, status with conditions, addresses, capacity and a list of
// images; plus flannel's annotations and a podCIDR.
func fatNode(name, cidr string) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
				"kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m5.large",
				"topology.kubernetes.io/region": "eu-west-1", "topology.kubernetes.io/zone": "eu-west-1a"},
			Annotations: map[string]string{
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"csi.volume.kubernetes.io/nodeid":                        `{"ebs.csi.aws.com":"i-0123456789abcdef0"}`,
				"flannel.alpha.coreos.com/backend-type":                  "vxlan",
				"flannel.alpha.coreos.com/backend-data":                  `{"VNI":1,"VtepMAC":"02:00:00:00:00:01"}`,
				"flannel.alpha.coreos.com/public-ip":                     "192.0.2.10",
				"flannel.alpha.coreos.com/kube-subnet-manager":           "true",
			}},
		Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}, ProviderID: "aws:///eu-west-1a/i-0123456789abcdef0"},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"),
				corev1.ResourcePods: resource.MustParse("110")},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}, {Type: corev1.NodeHostName, Address: name}},
			NodeInfo: corev1.NodeSystemInfo{KernelVersion: "6.1.0-18-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)",
				ContainerRuntimeVersion: "containerd://1.6.20", KubeletVersion: "v1.31.0", Architecture: "amd64", OperatingSystem: "linux"},
		},
	}
	for _, c := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: c, Status: corev1.ConditionFalse,
			Reason: "KubeletHasSufficient" + string(c), Message: "kubelet has sufficient resources for " + string(c)})
	}
	for i := range 40 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{SizeBytes: int64(10_000_000 + i),
			Names: []string{fmt.Sprintf("registry.example/team/app-%d@sha256:%064x", i, i), fmt.Sprintf("registry.example/team/app-%d:v1.%d", i, i)}})
	}
	return n
}

// TestSlimNode: the informer's transform keeps name, UID, resource version, podCIDRs
// and the annotations under our prefix, and nothing else.
func TestSlimNode(t *testing.T) {
	m := &Manager{prefix: "flannel.alpha.coreos.com/"}
	n := fatNode("n1", "198.18.1.0/24")
	n.UID, n.ResourceVersion = "u-1", "42"
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}
	got, err := m.slim(n)
	if err != nil {
		t.Fatal(err)
	}
	s := got.(*corev1.Node)
	if s.Name != "n1" || s.UID != "u-1" || s.ResourceVersion != "42" || s.Spec.PodCIDR != "198.18.1.0/24" ||
		len(s.Spec.PodCIDRs) != 1 || s.Spec.PodCIDRs[0] != "198.18.1.0/24" {
		t.Fatalf("identity or podCIDRs lost: %+v", s)
	}
	if len(s.Annotations) != 4 || s.Annotations["flannel.alpha.coreos.com/public-ip"] != "192.0.2.10" {
		t.Fatalf("annotations %v, want flannel's four", s.Annotations)
	}
	if len(s.Labels) != 0 || len(s.ManagedFields) != 0 || len(s.Status.Images) != 0 || len(s.Status.Conditions) != 0 ||
		s.Spec.ProviderID != "" || s.Status.NodeInfo.KubeletVersion != "" {
		t.Fatalf("kept what weftd never reads: %+v", s)
	}
	if l, ok := (&Manager{prefix: m.prefix, log: zap.NewNop()}).leaseOf(s); !ok || l.Subnet.String() != "198.18.1.0/24" ||
		l.Attrs.PublicIP.String() != "192.0.2.10" {
		t.Fatalf("lease of the slim node: %v %v", l, ok)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "n1", Obj: s}
	if got, _ := m.slim(tomb); got != tomb {
		t.Fatalf("a tombstone changed: %v", got)
	}
}

// TestNodeCacheIsSlim: with a real kube-apiserver and kube-flannel's rights, the
// manager's node cache holds the slim nodes (no status, labels or managedFields, which
// the server does fill in), and peers are still read from them.
func TestNodeCacheIsSlim(t *testing.T) {
	srv, cs := apiServer(t)
	id := flannel(t, srv, cs)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createFatNode(t, cs, "n1", "198.18.1.0/24")
	createFatNode(t, cs, "n2", "198.18.2.0/24")
	full, err := cs.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{})
	if err != nil || len(full.ManagedFields) == 0 || len(full.Status.Images) == 0 {
		t.Fatalf("the server's n2 should have managedFields and images: %v", err)
	}
	m := newManager(t, id, Options{NodeName: "n1"})
	events := make(chan []lease.Event, 4)
	go m.Watch(ctx, lease.Key{Subnet: netip.MustParsePrefix("198.18.1.0/24")}, events)
	expect(t, events, lease.Added, "198.18.2.0/24", "192.0.2.10")
	obj, ok, err := m.informer.GetStore().GetByKey("n2")
	if err != nil || !ok {
		t.Fatalf("n2 not in the cache: %v", err)
	}
	n := obj.(*corev1.Node)
	if len(n.ManagedFields) != 0 || len(n.Status.Images) != 0 || len(n.Labels) != 0 || len(n.Annotations) != 4 {
		t.Fatalf("cached n2 is not slim: %d managedFields, %d images, labels %v, annotations %v",
			len(n.ManagedFields), len(n.Status.Images), n.Labels, n.Annotations)
	}
}

func createFatNode(t testing.TB, cs kubernetes.Interface, name, cidr string) {
	t.Helper()
	ctx := context.Background()
	n := fatNode(name, cidr)
	st := n.Status
	created, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err == nil {
		created.Status = st
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Error(err) // not Fatal: BenchmarkNodeCache calls it from goroutines
	}
}

// BenchmarkNodeCache: the heap a node informer holds for 5,000 realistic Nodes in a
// real kube-apiserver, whole (as a plain informer keeps them) and slim (weftd's).
func BenchmarkNodeCache(b *testing.B) {
	const nodes = 5000
	_, cs := apiServer(b)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < nodes; i += 8 {
				createFatNode(b, cs, fmt.Sprintf("node-%04d", i), fmt.Sprintf("198.18.%d.%d/29", i/32, i%32*8))
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	for _, slim := range []bool{false, true} {
		b.Run(fmt.Sprintf("slim=%v", slim), func(b *testing.B) {
			var perNode float64
			for b.Loop() {
				m, err := NewWithClient(cs, Options{NodeName: "node-0000"}, zap.NewNop())
				if err != nil {
					b.Fatal(err)
				}
				heap := func() uint64 {
					runtime.GC()
					var ms runtime.MemStats
					runtime.ReadMemStats(&ms)
					return ms.HeapAlloc
				}
				before := heap()
				inf := cache.NewSharedIndexInformer(trackedNodes{nodes: cs.CoreV1().Nodes(), c: m.contact}, &corev1.Node{}, 0, cache.Indexers{})
				if slim {
					if err := inf.SetTransform(m.slim); err != nil {
						b.Fatal(err)
					}
				}
				stop := make(chan struct{})
				go inf.Run(stop)
				if !cache.WaitForCacheSync(stop, inf.HasSynced) || len(inf.GetStore().List()) != nodes {
					b.Fatalf("cache holds %d nodes, want %d", len(inf.GetStore().List()), nodes)
				}
				after := heap()
				perNode = float64(after-before) / nodes
				close(stop)
				runtime.KeepAlive(inf)
			}
			b.ReportMetric(perNode, "heapB/node")
			b.ReportMetric(perNode*nodes/(1<<20), "heapMiB")
		})
	}
}

// TestSlimKeepsDualStack: the node cache's transform keeps what a dual-stack peer's
// lease is read from (both podCIDRs, the IPv6 annotations) and drops the rest; the
// lease read off the slim Node is the one read off the whole Node.
func TestSlimKeepsDualStack(t *testing.T) {
	m := &Manager{log: zap.NewNop(), prefix: DefaultAnnotationPrefix + "/",
		cfg: &lease.Config{EnableIPv4: true, EnableIPv6: true}}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{"zone": "a"}, Annotations: map[string]string{
			"flannel.alpha.coreos.com/backend-type":    "vxlan",
			"flannel.alpha.coreos.com/backend-data":    `{"VNI":1,"VtepMAC":"0e:00:00:00:00:02"}`,
			"flannel.alpha.coreos.com/public-ip":       "192.0.2.20",
			"flannel.alpha.coreos.com/backend-v6-data": `{"VNI":1,"VtepMAC":"0e:00:00:01:00:02"}`,
			"flannel.alpha.coreos.com/public-ipv6":     "2001:db8::20",
			"node.alpha.kubernetes.io/ttl":             "0",
		}},
		Spec:   corev1.NodeSpec{PodCIDR: "198.18.2.0/24", PodCIDRs: []string{"198.18.2.0/24", "fd00:18:0:2::/64"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.20"}}},
	}
	whole, ok := m.leaseOf(n)
	if !ok || !whole.Subnet.IsValid() || !whole.IPv6Subnet.IsValid() || !whole.Attrs.PublicIPv6.IsValid() || len(whole.Attrs.BackendV6Data) == 0 {
		t.Fatalf("the whole node gives no dual-stack lease: %+v", whole)
	}
	obj, err := m.slim(n)
	if err != nil {
		t.Fatal(err)
	}
	s := obj.(*corev1.Node)
	if len(s.Annotations) != 5 || len(s.Labels) != 0 || len(s.Status.Addresses) != 0 || len(s.Spec.PodCIDRs) != 2 {
		t.Fatalf("slim node: annotations %v, labels %v, addresses %v, podCIDRs %v",
			s.Annotations, s.Labels, s.Status.Addresses, s.Spec.PodCIDRs)
	}
	got, ok := m.leaseOf(s)
	if !ok || got.Key() != whole.Key() || !got.Attrs.Equal(whole.Attrs) {
		t.Fatalf("lease of the slim node %+v, of the whole node %+v", got, whole)
	}
}
