package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/weftnet/weft/bench"
	"github.com/weftnet/weft/bench/kubeproc"
	"github.com/weftnet/weft/bench/kubetest"
	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/testenv"
)

// kubeScaleNodes is how many peer Nodes BenchmarkKubeNodes makes (WEFT_KUBE_NODES
// overrides it).
func kubeScaleNodes() int {
	if n, err := strconv.Atoi(os.Getenv("WEFT_KUBE_NODES")); err == nil && n > 0 && n < 8000 {
		return n
	}
	return 5000
}

// scaleNode is peer i as a kubelet and flannel leave it: labels, status with
// conditions and 40 images, flannel's vxlan annotations and a /29 podCIDR.
func scaleNode(i int) *corev1.Node {
	name := fmt.Sprintf("peer-%04d", i)
	cidr := fmt.Sprintf("198.18.%d.%d/29", i/32, i%32*8)
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

// BenchmarkKubeNodes: weftd and the upstream flanneld, each alone on a lab host in
// Kubernetes mode (kube-flannel's identity, a real kube-apiserver), with 5,000 peer
// Nodes as kubelets leave them: time until every peer's route is in the kernel, and
// RSS a minute later (weftd's heap beside it in the log). Both must program every
// peer (the run fails otherwise).
func BenchmarkKubeNodes(b *testing.B) {
	testenv.SkipShort(b, "a real kube-apiserver with thousands of Nodes")
	testenv.NeedRoot(b)
	testenv.NeedTools(b, "go", "etcd", "ip")
	fl := filepath.Join(binDir(), "flanneld")
	_, err := os.Stat(fl)
	testenv.Need(b, err == nil, "upstream flanneld at "+fl+" (make flanneld builds it)")
	wd := needWeftd(b)
	nodes := kubeScaleNodes()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	l, _, cs, id, conf := kubeScaleSetup(ctx, b)
	t0 := time.Now()
	createNodes(b, cs, nodes)
	b.Logf("%d Nodes created in %.0fs", nodes, time.Since(t0).Seconds())

	k := 0 // each run has a host, Node and podCIDR of its own
	for _, d := range []struct{ name, bin string }{{"weftd", wd}, {"flanneld", fl}} {
		b.Run(d.name, func(b *testing.B) {
			var ready, rss float64
			for b.Loop() {
				ready, rss = kubeDaemon(ctx, b, l, cs, id, conf, d.bin, d.name == "weftd", nodes, k)
				k++
			}
			b.ReportMetric(ready, "ready-s")
			b.ReportMetric(rss, "RSS-MiB")
		})
	}
}

// needWeftd returns the weftd under test (skipping without one).
func needWeftd(t testing.TB) string {
	wd := filepath.Join(binDir(), "weftd")
	_, err := os.Stat(wd)
	testenv.Need(t, err == nil, "weftd at "+wd+" (make build)")
	return wd
}

// kubeScaleSetup starts a lab with a kube-apiserver on its router and returns it, an
// admin client (500 QPS, to make Nodes fast), kube-flannel's identity and a vxlan
// net-conf.json over 198.18.0.0/16.
func kubeScaleSetup(ctx context.Context, t testing.TB) (*lab.Lab, *kubeproc.Server, kubernetes.Interface, kubetest.Identity, string) {
	t.Helper()
	l := labtest.New(t, lab.Spec{Prefix: "wkn"})
	apiBin, err := kubeproc.Binary(ctx, "..")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := kubeproc.Start(ctx, kubeproc.Options{Binary: apiBin, Etcd: l.Etcd().Endpoint(), Netns: l.Router().Name,
		Host: "192.0.2.1", Dial: l.Router().DialContext})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cfg, err := clientcmd.BuildConfigFromFlags("", srv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dial, cfg.QPS, cfg.Burst = l.Router().DialContext, 500, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	id := kubetest.Flannel(t, cs, srv.URL, "..")
	conf := filepath.Join(t.TempDir(), "net-conf.json")
	if err := os.WriteFile(conf, []byte(`{"Network":"198.18.0.0/16","SubnetLen":29,"Backend":{"Type":"vxlan"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return l, srv, cs, id, conf
}

func createNodes(b testing.TB, cs kubernetes.Interface, n int) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				node := scaleNode(i)
				st := node.Status
				created, err := cs.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
				if err == nil {
					created.Status = st
					_, err = cs.CoreV1().Nodes().UpdateStatus(context.Background(), created, metav1.UpdateOptions{})
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
	for i := range n {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			b.Fatal(err)
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// startKubeDaemon starts one daemon on a fresh host k with its own Node (podCIDR
// 198.18.255.8k/29) and pod, as kube-flannel.yml would; weftd serves /metrics on
// 127.0.0.1:8475 in the host's namespace. It returns the host, the daemon and when it
// started.
func startKubeDaemon(ctx context.Context, b testing.TB, l *lab.Lab, cs kubernetes.Interface, id kubetest.Identity,
	conf, bin string, weft bool, k int) (*lab.Host, *lab.Daemon, time.Time) {
	b.Helper()
	h, err := l.AddHost(ctx, lab.HostSpec{Name: fmt.Sprintf("k%d", k)})
	if err != nil {
		b.Fatal(err)
	}
	node := "node-" + h.Name
	own := fmt.Sprintf("198.18.255.%d/29", 8*k)
	// A real Node always has annotations; flanneld v0.28.10 panics on a Node without any.
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
		Spec: corev1.NodeSpec{PodCIDR: own, PodCIDRs: []string{own}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	pod := "kube-flannel-ds-" + h.Name
	kubetest.Pod(b, cs, pod, node)
	t0 := time.Now()
	args := []string{"--kube-subnet-mgr", "--kubeconfig-file=" + id.Kubeconfig, "--net-config-path=" + conf}
	if weft {
		args = append(args, "--healthz-ip=127.0.0.1", "--healthz-port=8475")
	}
	d, err := l.Start(ctx, h, lab.DaemonSpec{Binary: bin, Weft: weft, NoEtcd: true,
		Env:  []string{"POD_NAME=" + pod, "POD_NAMESPACE=" + kubetest.Namespace},
		Args: args})
	if err != nil {
		b.Fatal(err)
	}
	return h, d, t0
}

// flannelRoutes returns the destinations of the routes through flannel.1 on h.
func flannelRoutes(ctx context.Context, h *lab.Host) map[string]bool {
	out, _ := h.NS.Run(ctx, "ip", "-4", "route", "show", "dev", "flannel.1")
	routes := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(line, "onlink") {
			routes[f[0]] = true
		}
	}
	return routes
}

// weftMetrics returns the body of weftd's /metrics on h (see startKubeDaemon).
func weftMetrics(h *lab.Host) (string, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: h.NS.DialContext}, Timeout: 5 * time.Second}
	resp, err := hc.Get("http://127.0.0.1:8475/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// listedLines returns weftd's log lines about its lists of the Nodes.
func listedLines(d *lab.Daemon) string {
	var out string
	for _, line := range strings.Split(d.Log(), "\n") {
		if strings.Contains(line, `"listed the Nodes"`) {
			out += "\n" + line
		}
	}
	return out
}

// metricValue is the value of the unlabelled sample name in a /metrics body.
func metricValue(body, name string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// kubeDaemon runs one daemon on a fresh host (its own Node and pod, as kube-flannel.yml
// would) until every peer's route is in the kernel; it returns that time and the RSS.
func kubeDaemon(ctx context.Context, b *testing.B, l *lab.Lab, cs kubernetes.Interface, id kubetest.Identity,
	conf, bin string, weft bool, peers, k int) (readyS, rssMiB float64) {
	b.Helper()
	h, d, t0 := startKubeDaemon(ctx, b, l, cs, id, conf, bin, weft, k)
	defer d.Stop()
	var count int
	deadline := time.Now().Add(10 * time.Minute)
	for {
		out, _ := h.NS.Run(ctx, "ip", "-4", "route", "show", "dev", "flannel.1")
		count = strings.Count(out, "onlink")
		if count >= peers {
			break
		}
		if exited, err := d.Exited(); exited || time.Now().After(deadline) {
			b.Fatalf("%s: %d of %d peer routes (exited %v: %v)\n%s", bin, count, peers, exited, err, d.LogTail(20))
		}
		time.Sleep(250 * time.Millisecond)
	}
	readyS = time.Since(t0).Seconds()
	rss := func() float64 {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.Pid()))
		if err != nil {
			b.Fatal(err)
		}
		v, err := bench.ParseVmRSS(string(status))
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	atReady := rss()
	// The Go runtime hands the list's garbage back to the kernel over the next minutes:
	// RSS is read again after a while, and weftd's own heap figures beside it.
	select {
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	case <-time.After(60 * time.Second):
	}
	rssMiB = rss()
	heap := ""
	if weft {
		if body, err := weftMetrics(h); err == nil {
			for _, name := range []string{"go_memstats_heap_alloc_bytes", "go_memstats_heap_inuse_bytes"} {
				if f, ok := metricValue(body, name); ok {
					heap += fmt.Sprintf(", %s %.1f MiB", strings.TrimPrefix(name, "go_memstats_"), f/(1<<20))
				}
			}
		}
	}
	b.Logf("%s: %d peers' routes after %.2fs, RSS %.1f MiB then, %.1f MiB 60 s later%s%s",
		filepath.Base(bin), count, readyS, atReady, rssMiB, heap, listedLines(d))
	return readyS, rssMiB
}

// TestKubeNodes500: weftd in Kubernetes mode with kube-flannel's rights and 500 peer
// Nodes as kubelets leave them (scaleNode): every peer's route, and no other, is in the
// kernel once weftd is ready, after one list of the Nodes; Nodes deleted (100 of them)
// take their routes with them and leave the others'.
func TestKubeNodes500(t *testing.T) {
	testenv.SkipShort(t, "a real kube-apiserver with 500 Nodes")
	testenv.NeedRoot(t)
	testenv.NeedTools(t, "go", "etcd", "ip")
	wd := needWeftd(t)
	const peers, deleted = 500, 100
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, srv, cs, id, conf := kubeScaleSetup(ctx, t)
	createNodes(t, cs, peers)
	want := map[string]bool{}
	for i := range peers {
		want[scaleNode(i).Spec.PodCIDR] = true
	}
	h, d, t0 := startKubeDaemon(ctx, t, l, cs, id, conf, wd, true, 0)
	defer d.Stop()
	// waitRoutes waits until the routes through flannel.1 are exactly want.
	waitRoutes := func(what string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			got := flannelRoutes(ctx, h)
			if maps.Equal(got, want) {
				return
			}
			if exited, err := d.Exited(); exited || time.Now().After(deadline) {
				var missing, stale []string
				for r := range want {
					if !got[r] {
						missing = append(missing, r)
					}
				}
				for r := range got {
					if !want[r] {
						stale = append(stale, r)
					}
				}
				t.Fatalf("%s: %d routes, %d missing (%.5v), %d stale (%.5v); exited %v: %v\n%s",
					what, len(got), len(missing), missing, len(stale), stale, exited, err, d.LogTail(20))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitRoutes("at start")
	t.Logf("%d peers' routes after %.2fs%s", peers, time.Since(t0).Seconds(), listedLines(d))
	body, err := weftMetrics(h)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := metricValue(body, "weft_kube_node_lists_total"); !ok || v != 1 {
		t.Errorf("weft_kube_node_lists_total %v (%v), want 1", v, ok)
	}
	if v, ok := metricValue(body, "weft_lease_watch_resyncs_total"); !ok || v != 0 {
		t.Errorf("weft_lease_watch_resyncs_total %v (%v), want 0", v, ok)
	}
	if t.Failed() {
		t.Log(d.LogTail(40))
	}

	for i := 0; i < peers; i += peers / deleted {
		n := scaleNode(i)
		if err := cs.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		delete(want, n.Spec.PodCIDR)
	}
	waitRoutes("after deleting " + strconv.Itoa(deleted) + " Nodes")

	// The API server restarts: weftd's watch fails while it is away and is retried
	// without a list; once it is back, at most one re-list (the watch's resource version
	// is gone with the server's watch cache), and a Node deleted then is seen.
	if err := srv.Restart(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	n := scaleNode(1)
	if err := cs.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	delete(want, n.Spec.PodCIDR)
	waitRoutes("after an API server restart and one more Node deleted")
	if body, err = weftMetrics(h); err != nil {
		t.Fatal(err)
	}
	lists, _ := metricValue(body, "weft_kube_node_lists_total")
	relists, _ := metricValue(body, "weft_lease_watch_resyncs_total")
	errs, _ := metricValue(body, "weft_lease_watch_errors_total")
	t.Logf("after the restart: %v lists, %v re-lists, %v watch errors%s", lists, relists, errs, listedLines(d))
	if lists > 2 || relists > 1 {
		t.Errorf("%v lists and %v re-lists after one API server restart, want at most one re-list", lists, relists)
	}
}
