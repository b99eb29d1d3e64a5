package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.uber.org/zap"

	"github.com/weftnet/weft/bench/lab"
)

// KubeScaleOptions configure a scale run in Kubernetes mode.
type KubeScaleOptions struct {
	Sizes    []int // numbers of peer Nodes, ascending, at most KubeMaxNodes
	Subjects []ScaleSubject
	// Rest is how long the daemon idles after it is ready before RSS is read again
	// (default 60 s).
	Rest      time.Duration
	Churn     time.Duration // Node changes for this long; default 60 s, 0 with NoChurn
	Rate      int           // Node changes per second; default 50
	NoChurn   bool
	RepoRoot  string // for test/kube (the API server) and deploy/rbac.yml
	StateFile string
	Progress  io.Writer
}

// kubeRun is the state of a Kubernetes-mode run: the API server and the peer Nodes.
type kubeRun struct {
	o     KubeScaleOptions
	env   *KubeEnv
	nodes map[int]bool // peer Node indices that exist
	rnd   *rand.Rand
	k     int // daemons started
}

func (r *kubeRun) progress(format string, a ...any) {
	if r.o.Progress != nil {
		fmt.Fprintf(r.o.Progress, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
	}
}

// RunKubeScale runs the scale benchmark in Kubernetes mode: for each size, N peer
// Nodes as kubelets and flannel leave them are in a real kube-apiserver, then each
// subject runs alone on a fresh lab host with kube-flannel's identity and is measured:
// ready time (every peer's route in its namespace), RSS then and after Rest, CPU,
// update latency while Nodes come and go at Rate, and its requests to the API server
// by verb (from the server's audit log, kube-flannel's ServiceAccount alone).
func RunKubeScale(ctx context.Context, o KubeScaleOptions, log *zap.Logger) (*ScaleReport, error) {
	if len(o.Sizes) == 0 || len(o.Subjects) == 0 {
		return nil, errors.New("scale: no sizes or no subjects")
	}
	for _, n := range o.Sizes {
		if n < 1 || n > KubeMaxNodes {
			return nil, fmt.Errorf("scale: %d Nodes is not within 1..%d", n, KubeMaxNodes)
		}
	}
	if o.Rest <= 0 {
		o.Rest = time.Minute
	}
	if o.Churn <= 0 && !o.NoChurn {
		o.Churn = time.Minute
	}
	if o.NoChurn {
		o.Churn = 0
	}
	if o.Rate <= 0 {
		o.Rate = 50
	}
	rep := &ScaleReport{Mode: "kube", Started: time.Now(), Backend: "vxlan", Network: lab.Overlay.String(), SubnetLen: 29,
		Kernel: kernel(), CPUs: runtime.NumCPU(), IdleS: o.Rest.Seconds(), ChurnS: o.Churn.Seconds(), Rate: o.Rate}
	l, err := lab.New(ctx, lab.Spec{Prefix: "wks", StateFile: o.StateFile}, log)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	r := &kubeRun{o: o, nodes: map[int]bool{}, rnd: rand.New(rand.NewSource(1))}
	r.progress("starting kube-apiserver")
	if r.env, err = NewKubeEnv(ctx, l, o.RepoRoot); err != nil {
		return nil, err
	}
	defer r.env.Close()
	for _, n := range o.Sizes {
		t0 := time.Now()
		if err := r.populate(ctx, n); err != nil {
			return rep, err
		}
		r.progress("%d Nodes (made in %.0fs)", n, time.Since(t0).Seconds())
		for _, s := range o.Subjects {
			r.progress("%d Nodes: %s", n, s.Name)
			p := r.measure(ctx, s, n)
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			for _, e := range p.Errors {
				r.progress("  %s: %s", s.Name, firstLine(e))
			}
			rep.Points = append(rep.Points, p)
		}
	}
	return rep, nil
}

// populate makes the peer Nodes n: more are created, or some deleted.
func (r *kubeRun) populate(ctx context.Context, n int) error {
	var add []int
	for i := 0; len(r.nodes)+len(add) < n && i < KubeMaxNodes; i++ {
		if !r.nodes[i] {
			add = append(add, i)
		}
	}
	if err := CreateKubeNodes(ctx, r.env.Admin, add); err != nil {
		return err
	}
	for _, i := range add {
		r.nodes[i] = true
	}
	for i := range r.nodes {
		if len(r.nodes) <= n {
			break
		}
		if err := r.env.Admin.CoreV1().Nodes().Delete(ctx, KubeNodeName(i), metav1.DeleteOptions{}); err != nil {
			return err
		}
		delete(r.nodes, i)
	}
	return nil
}

// want is the set of peer subnets the daemons should route.
func (r *kubeRun) want() map[netip.Prefix]bool {
	out := make(map[netip.Prefix]bool, len(r.nodes))
	for i := range r.nodes {
		out[netip.MustParsePrefix(KubeNodeCIDR(i))] = true
	}
	return out
}

func (r *kubeRun) measure(ctx context.Context, s ScaleSubject, n int) ScalePoint {
	pt := newScalePoint(s, n)
	pt.PeersSeen = true
	if err := r.measureInto(ctx, s, n, &pt); err != nil {
		pt.Errors = append(pt.Errors, err.Error())
	}
	return pt
}

// loadavg is the 1-minute load average.
func loadavg() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return -1
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func (r *kubeRun) measureInto(ctx context.Context, s ScaleSubject, n int, pt *ScalePoint) (err error) {
	off, err := AuditSize(r.env.AuditLog)
	if err != nil {
		return err
	}
	r.k++
	kd, err := r.env.StartKubeDaemon(ctx, s.Binary, s.Weft, r.k)
	if kd != nil {
		defer func() {
			// Stopped before the requests are read: a watch's request is complete then.
			if rerr := r.env.Remove(ctx, kd); rerr != nil && err == nil && ctx.Err() == nil {
				err = fmt.Errorf("remove the daemon: %w", rerr)
			}
			pt.RunS = time.Since(kd.Started).Seconds()
			if req, rerr := KubeRequests(r.env.AuditLog, off); rerr == nil {
				pt.Requests = req
			} else if err == nil {
				err = rerr
			}
		}()
	}
	if err != nil {
		return err
	}
	d, h := kd.D, kd.Host
	routes, err := watchRoutes(h.NS.Name, lab.Overlay, 29)
	if err != nil {
		return err
	}
	defer routes.close()
	v := &daemonView{weft: s.Weft, routes: routes, hc: weftClient(h)}
	if err := r.readyAndRest(ctx, d, v, kd.Started, pt); err != nil {
		return err
	}
	pid := d.Pid()
	if r.o.Churn > 0 {
		if err := r.measureChurn(ctx, routes, pid, pt); err != nil {
			return err
		}
	}
	if c, err := lab.ProcCPU(pid); err == nil {
		pt.CPUS = c.Seconds()
	}
	pt.WatchOverflows = routes.overflows()
	if ok, err := d.Exited(); ok {
		return fmt.Errorf("%w: %v", lab.ErrDaemonExited, err)
	}
	return nil
}

// readyAndRest waits for the daemon d, started at started, to route every peer Node,
// reads its RSS, heap and CPU then, and again after Rest at rest.
func (r *kubeRun) readyAndRest(ctx context.Context, d *lab.Daemon, v *daemonView, started time.Time, pt *ScalePoint) error {
	routes := v.routes
	if err := poll(ctx, 10*time.Minute, 20*time.Millisecond, func() (bool, error) {
		if ok, err := d.Exited(); ok {
			return false, fmt.Errorf("%w: %v\n%s", lab.ErrDaemonExited, err, d.LogTail(20))
		}
		return routes.count() >= len(r.nodes), nil
	}); err != nil {
		return fmt.Errorf("%d of %d peer routes: %w", routes.count(), len(r.nodes), err)
	}
	pt.ReadyS = time.Since(started).Seconds()
	pt.Load1 = loadavg()
	pid := d.Pid()
	pt.RSSMiB, _ = rssMiB(pid)
	if c, err := lab.ProcCPU(pid); err == nil {
		pt.CPUReadyS = c.Seconds()
	}
	pt.HeapMiB = v.heapMiB()
	r.progress("  ready in %.2fs (load %.1f), RSS %.1f MiB, CPU %.2fs", pt.ReadyS, pt.Load1, pt.RSSMiB, pt.CPUReadyS)
	var err error
	if pt.IdleCPUPct, err = cpuOver(ctx, pid, r.o.Rest); err != nil {
		return err
	}
	pt.RSSRestMiB, _ = rssMiB(pid)
	pt.HeapRestMiB = v.heapMiB()
	r.progress("  after %s at rest: RSS %.1f MiB, CPU %.2f%%", r.o.Rest, pt.RSSRestMiB, pt.IdleCPUPct)
	return nil
}

// measureChurn runs the churn and measures it: update latency, the daemon pid's CPU,
// the routes against the peer Nodes afterwards.
func (r *kubeRun) measureChurn(ctx context.Context, routes *routeWatch, pid int, pt *ScalePoint) error {
	err := pt.ScaleChurn.record(pid, r.o.Churn, func() ([]float64, int, int, error) { return r.churn(ctx, routes) })
	if err != nil {
		return err
	}
	pt.StaleAfterChurn, pt.MissingAfterChurn, err = r.settled(ctx, routes)
	if err != nil {
		return err
	}
	r.progress("  churn: %d changes, p50 %.1f ms, p99 %.1f ms, missed %d, CPU %.1f%%, stale %d, missing %d",
		pt.ChurnOps, pt.P50Ms, pt.P99Ms, pt.Missed, pt.ChurnCPUPct, pt.StaleAfterChurn, pt.MissingAfterChurn)
	return nil
}

// settled waits until the routes equal the peer Nodes (at most 30 s) and returns the
// difference then.
func (r *kubeRun) settled(ctx context.Context, routes *routeWatch) (stale, missing int, err error) {
	want := r.want()
	err = poll(ctx, 30*time.Second, 200*time.Millisecond, func() (bool, error) {
		have, err := routes.list()
		if err != nil {
			return false, err
		}
		stale, missing = diff(have, want)
		return stale == 0 && missing == 0, nil
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = nil
	}
	return stale, missing, err
}

// churn deletes a peer Node or creates a new one (with flannel's annotations and a
// podCIDR, then its status, as a kubelet registering), in turn, Rate times a second
// for Churn, so the number of Nodes stays. Each change's latency runs from just
// before the API server write (the delete, or the create) to the route's netlink event
// in the daemon's namespace; one whose event never came within 10 s is missed. Writes
// run concurrently (at most 32 at once) so a slow one does not hold the rate back.
func (r *kubeRun) churn(ctx context.Context, routes *routeWatch) (lat []float64, ops, missed int, err error) {
	free, live := r.freeAndLive()
	var updates updateWait
	var errMu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(r.o.Rate))
	defer tick.Stop()
	end := time.Now().Add(r.o.Churn)
	// An even number of changes: as many Nodes created as deleted, so N stays.
	for time.Now().Before(end) || ops%2 == 1 {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil, 0, 0, ctx.Err()
		case <-tick.C:
		}
		add := ops%2 == 1 || len(live) == 0
		var i int
		if add {
			// The front of the free queue: a Node deleted in the churn goes to its
			// back, so a create never races the delete of the same name.
			i, free = free[0], free[1:]
			live = append(live, i)
			r.nodes[i] = true
		} else {
			i, live = live[0], live[1:]
			free = append(free, i)
			delete(r.nodes, i)
		}
		p := netip.MustParsePrefix(KubeNodeCIDR(i))
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return nil, 0, 0, ctx.Err()
		}
		t := time.Now()
		routes.expect(p, add, updates.expect(t))
		wg.Go(func() {
			defer func() { <-sem }()
			if err := r.change(ctx, add, i); err != nil {
				errMu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("scale: churn write: %w", err)
				}
				errMu.Unlock()
			}
		})
		ops++
	}
	wg.Wait()
	if firstErr != nil {
		return nil, 0, 0, firstErr
	}
	lat, missed = updates.wait(ctx)
	sort.Float64s(lat)
	return lat, ops, missed, nil
}

// freeAndLive returns the peer Node indices free (in order) and live (shuffled).
func (r *kubeRun) freeAndLive() (free, live []int) {
	for i := range KubeMaxNodes {
		if r.nodes[i] {
			live = append(live, i)
		} else {
			free = append(free, i)
		}
	}
	r.rnd.Shuffle(len(live), func(a, b int) { live[a], live[b] = live[b], live[a] })
	return free, live
}

// change creates peer Node i (add) or deletes it.
func (r *kubeRun) change(ctx context.Context, add bool, i int) error {
	if add {
		return CreateKubeNode(ctx, r.env.Admin, i)
	}
	return r.env.Admin.CoreV1().Nodes().Delete(ctx, KubeNodeName(i), metav1.DeleteOptions{})
}

// weftClient reaches weftd's /metrics in h's namespace.
func weftClient(h *lab.Host) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: h.NS.DialContext}}
}

// heapMiB is weftd's heap in use (go_memstats_heap_inuse_bytes) in MiB; 0 for
// another daemon or when it cannot be read.
func (v *daemonView) heapMiB() float64 {
	if !v.weft {
		return 0
	}
	m, err := v.metrics()
	if err != nil {
		return 0
	}
	return m["go_memstats_heap_inuse_bytes"] / (1 << 20)
}
