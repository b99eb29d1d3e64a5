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
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftnet/weft/bench"
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
	env := kubeScaleSetup(ctx, b)
	t0 := time.Now()
	createNodes(b, env, nodes)
	b.Logf("%d Nodes created in %.0fs", nodes, time.Since(t0).Seconds())

	k := 0 // each run has a host, Node and podCIDR of its own
	for _, d := range []struct{ name, bin string }{{"weftd", wd}, {"flanneld", fl}} {
		b.Run(d.name, func(b *testing.B) {
			var ready, rss float64
			for b.Loop() {
				ready, rss = kubeDaemon(ctx, b, env, d.bin, d.name == "weftd", nodes, k)
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

// kubeScaleSetup starts a lab with a kube-apiserver on its router (bench.NewKubeEnv:
// an admin client, kube-flannel's identity, a vxlan net-conf.json over
// 198.18.0.0/16), removed at cleanup.
func kubeScaleSetup(ctx context.Context, t testing.TB) *bench.KubeEnv {
	t.Helper()
	l := labtest.New(t, lab.Spec{Prefix: "wkn"})
	env, err := bench.NewKubeEnv(ctx, l, "..")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	return env
}

// createNodes makes peer Nodes 0..n-1 (bench.KubeNode).
func createNodes(t testing.TB, env *bench.KubeEnv, n int) {
	t.Helper()
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	if err := bench.CreateKubeNodes(context.Background(), env.Admin, idx); err != nil {
		t.Fatal(err)
	}
}

// startKubeDaemon starts one daemon on a fresh host k (bench.KubeEnv.StartKubeDaemon)
// and stops it at cleanup.
func startKubeDaemon(ctx context.Context, t testing.TB, env *bench.KubeEnv, bin string, weft bool, k int) (*lab.Host, *lab.Daemon, time.Time) {
	t.Helper()
	kd, err := env.StartKubeDaemon(ctx, bin, weft, k)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kd.D.Stop() })
	return kd.Host, kd.D, kd.Started
}

// weftMetrics returns the body of weftd's /metrics on h (see startKubeDaemon).
func weftMetrics(h *lab.Host) (string, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: h.NS.DialContext}, Timeout: 5 * time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", bench.KubeHealthzPort))
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
func kubeDaemon(ctx context.Context, b *testing.B, env *bench.KubeEnv, bin string, weft bool, peers, k int) (readyS, rssMiB float64) {
	b.Helper()
	h, d, t0 := startKubeDaemon(ctx, b, env, bin, weft, k)
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
// Nodes as kubelets leave them (bench.KubeNode): every peer's route, and no other, is in the
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
	env := kubeScaleSetup(ctx, t)
	cs := env.Admin
	createNodes(t, env, peers)
	want := map[string]bool{}
	for i := range peers {
		want[bench.KubeNodeCIDR(i)] = true
	}
	h, d, t0 := startKubeDaemon(ctx, t, env, wd, true, 0)
	defer d.Stop()
	// waitRoutes waits until the routes through flannel.1 are exactly want.
	waitRoutes := func(what string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			got := bench.FlannelRoutes(ctx, h)
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
		n := bench.KubeNode(i)
		if err := cs.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		delete(want, n.Spec.PodCIDR)
	}
	waitRoutes("after deleting " + strconv.Itoa(deleted) + " Nodes")

	// The API server restarts: weftd's watch fails while it is away and is retried
	// without a list; once it is back, at most one re-list (the watch's resource version
	// is gone with the server's watch cache), and a Node deleted then is seen.
	if err := env.Server.Restart(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	n := bench.KubeNode(1)
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
