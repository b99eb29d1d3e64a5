package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/weftnet/weft/bench/etcdtest"
	"github.com/weftnet/weft/bench/kubeproc"
	"github.com/weftnet/weft/bench/kubetest"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
)

var (
	apiOnce sync.Once
	apiBin  string
	apiErr  error
)

// apiServer runs a real kube-apiserver (built once, cached) on a real etcd for t, and
// returns it with an admin client for the test's own setup.
func apiServer(t testing.TB) (*kubeproc.Server, kubernetes.Interface) {
	t.Helper()
	testenv.SkipShort(t, "a real kube-apiserver (built first) and etcd")
	testenv.NeedTools(t, "go", "etcd")
	apiOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		apiBin, apiErr = kubeproc.Binary(ctx, "../..")
	})
	if apiErr != nil {
		t.Fatal(apiErr)
	}
	etcd := etcdtest.Start(t)
	port := freePort(t)
	srv, err := kubeproc.Start(context.Background(), kubeproc.Options{Binary: apiBin, Etcd: etcd.Endpoint(), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv, clientFor(t, srv.Kubeconfig)
}

func clientFor(t testing.TB, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 500, 1000 // the test's own setup (thousands of Nodes in BenchmarkNodeCache)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// flannel is weftd's identity: kube-flannel's ServiceAccount with deploy/rbac.yml.
func flannel(t *testing.T, srv *kubeproc.Server, admin kubernetes.Interface) kubetest.Identity {
	t.Helper()
	return kubetest.Flannel(t, admin, srv.URL, "../..")
}

func createNode(t *testing.T, cs kubernetes.Interface, name, cidr string, annotations map[string]string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Spec: corev1.NodeSpec{PodCIDR: cidr}}
	if cidr != "" {
		n.Spec.PodCIDRs = []string{cidr}
	}
	if _, err := cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// newManager runs as weftd would, with the flannel identity's kubeconfig.
func newManager(t *testing.T, id kubetest.Identity, o Options) *Manager {
	t.Helper()
	return newManagerConf(t, id, o, `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan"}}`)
}

// newManagerConf is newManager on the network config netConf.
func newManagerConf(t *testing.T, id kubetest.Identity, o Options, netConf string) *Manager {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "net-conf.json")
	if err := os.WriteFile(conf, []byte(netConf), 0o644); err != nil {
		t.Fatal(err)
	}
	o.Kubeconfig, o.NetConfPath, o.SetNodeNetworkUnavailable = id.Kubeconfig, conf, true
	m, err := New(o, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		if m.informer != nil && !m.informer.IsStopped() {
			t.Errorf("node informer of %s still running after Close", o.NodeName)
		}
	})
	return m
}

func attrs(ip string) lease.Attrs {
	return lease.Attrs{PublicIP: netip.MustParseAddr(ip), BackendType: "vxlan", BackendData: json.RawMessage(`{"VtepMAC":"02:00:00:00:00:01"}`)}
}

// TestKubeSubnetManager runs the manager with kube-flannel's rights only (a
// ServiceAccount token, deploy/rbac.yml): nodes found by name or from their pod,
// annotations published, peers watched, NetworkUnavailable cleared, annotations kept.
func TestKubeSubnetManager(t *testing.T) {
	srv, cs := apiServer(t)
	id := flannel(t, srv, cs)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createNode(t, cs, "n1", "198.18.1.0/24", nil)
	createNode(t, cs, "n2", "198.18.2.0/24", nil)
	createNode(t, cs, "n3", "", nil)
	kubetest.Pod(t, cs, "kube-flannel-ds-n2", "n2")

	m1 := newManager(t, id, Options{NodeName: "n1"})
	cfg, err := m1.Config(ctx)
	if err != nil || cfg.BackendType != "vxlan" {
		t.Fatalf("config %+v: %v", cfg, err)
	}
	l1, err := m1.Acquire(ctx, attrs("192.0.2.10"))
	if err != nil || l1.Subnet.String() != "198.18.1.0/24" {
		t.Fatalf("acquire n1: %v %v", l1, err)
	}
	n1, _ := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	want := map[string]string{
		"flannel.alpha.coreos.com/backend-data":        `{"VtepMAC":"02:00:00:00:00:01"}`,
		"flannel.alpha.coreos.com/backend-type":        "vxlan",
		"flannel.alpha.coreos.com/kube-subnet-manager": "true",
		"flannel.alpha.coreos.com/public-ip":           "192.0.2.10",
	}
	for k, v := range want {
		if n1.Annotations[k] != v {
			t.Fatalf("annotation %s = %q, want %q", k, n1.Annotations[k], v)
		}
	}

	events := make(chan []lease.Event, 16)
	go m1.Watch(ctx, l1.Key(), events)
	if got := <-events; len(got) != 0 {
		t.Fatalf("snapshot before n2 published: %v", got)
	}
	// n2 finds its node from its pod, as kube-flannel.yml's POD_NAME and POD_NAMESPACE say.
	m2 := newManager(t, id, Options{PodName: "kube-flannel-ds-n2", PodNamespace: kubetest.Namespace})
	if _, err := m2.Acquire(ctx, attrs("192.0.2.11")); err != nil {
		t.Fatal(err)
	}
	expect(t, events, lease.Added, "198.18.2.0/24", "192.0.2.11")

	// A node without a podCIDR waits, then proceeds when node IPAM sets one.
	m3 := newManager(t, id, Options{NodeName: "n3"})
	got3 := make(chan lease.Lease, 1)
	go func() {
		l, err := m3.Acquire(ctx, attrs("198.51.100.10"))
		if err != nil {
			t.Error(err)
		}
		got3 <- l
	}()
	select {
	case l := <-got3:
		t.Fatalf("acquired %v before a podCIDR was set", l)
	case <-time.After(time.Second):
	}
	n3, _ := cs.CoreV1().Nodes().Get(ctx, "n3", metav1.GetOptions{})
	n3.Spec.PodCIDR, n3.Spec.PodCIDRs = "198.18.3.0/24", []string{"198.18.3.0/24"}
	if _, err := cs.CoreV1().Nodes().Update(ctx, n3, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if l := <-got3; l.Subnet.String() != "198.18.3.0/24" {
		t.Fatalf("n3 got %v", l.Subnet)
	}
	expect(t, events, lease.Added, "198.18.3.0/24", "198.51.100.10")

	// A podCIDR outside Network (kube-flannel's 10.244.0.0/16 left in a ConfigMap of a
	// cluster that allocates others) is refused at once, as flanneld refuses it, and the
	// node is not annotated: no other host routes to a subnet nobody serves.
	createNode(t, cs, "n4", "10.244.4.0/24", nil)
	m4 := newManager(t, id, Options{NodeName: "n4"})
	if _, err := m4.Config(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := m4.Acquire(ctx, attrs("198.51.100.11")); !errors.Is(err, ErrPodCIDROutsideNetwork) {
		t.Fatalf("acquire with a podCIDR outside Network: %v, %v; want ErrPodCIDROutsideNetwork", l, err)
	}
	n4, _ := cs.CoreV1().Nodes().Get(ctx, "n4", metav1.GetOptions{})
	if v, ok := n4.Annotations["flannel.alpha.coreos.com/public-ip"]; ok {
		t.Fatalf("n4 annotated (public-ip %q) although its podCIDR is outside Network", v)
	}

	// A deleted node is a removed lease.
	if err := cs.CoreV1().Nodes().Delete(ctx, "n2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(t, events, lease.Removed, "198.18.2.0/24", "192.0.2.11")

	// NetworkUnavailable is cleared as flanneld does.
	if err := m1.MarkNetworkReady(ctx); err != nil {
		t.Fatal(err)
	}
	n1, _ = cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	found := false
	for _, c := range n1.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionFalse && c.Reason == "FlannelIsUp" {
			found = true
		}
	}
	if !found {
		t.Fatalf("NetworkUnavailable not cleared: %+v", n1.Status.Conditions)
	}

	// Annotations removed by hand are published again by Hold.
	go m1.Hold(ctx, l1, func(lease.Lease) {})
	if err := m1.Health(time.Now()); err != nil {
		t.Fatalf("health with the lease held: %v", err)
	}
	patch := []byte(`{"metadata":{"annotations":{"flannel.alpha.coreos.com/public-ip":null}}}`)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "n1", "application/strategic-merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		n1, _ = cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if n1.Annotations["flannel.alpha.coreos.com/public-ip"] == "192.0.2.10" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("public-ip annotation not restored: %v", n1.Annotations)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func expect(t *testing.T, events <-chan []lease.Event, typ lease.EventType, subnet, ip string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case evs := <-events:
			for _, e := range evs {
				if e.Type == typ && e.Lease.Subnet.String() == subnet && e.Lease.Attrs.PublicIP.String() == ip {
					return
				}
			}
		case <-timeout:
			t.Fatalf("no %v event for %s (%s)", typ, subnet, ip)
		}
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	var p int
	for p = 16443; p < 16543; p++ {
		if l, err := listen(p); err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal(fmt.Errorf("no free port"))
	return 0
}
