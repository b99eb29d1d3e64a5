package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weftnet/weft/bench/lab"
)

// kernelPath reports whether the backend's data path is kernel routes the benchmark
// can watch.
func (r *scaleRun) kernelPath() bool { return r.o.Backend == "vxlan" || r.o.Backend == "host-gw" }

// daemonView is how the benchmark sees what a daemon has in its data path.
type daemonView struct {
	routes *routeWatch // kernel backends
	d      *lab.Daemon
	weft   bool
	alloc  bool // the alloc backend carries nothing: no peers to see
	hc     *http.Client
}

// peers returns the number of peers in the data path, and whether it can be seen.
func (v *daemonView) peers() (int, bool) {
	if v.routes != nil {
		return v.routes.count(), true
	}
	if v.weft && !v.alloc {
		m, err := v.metrics()
		if err == nil {
			if n, ok := m["weft_peers"]; ok {
				return int(n), true
			}
		}
		return -1, true
	}
	return 0, false
}

// weftHealthzPort is where the measured weftd serves /metrics inside its namespace.
const weftHealthzPort = 8475

// metrics scrapes weftd's /metrics: unlabelled samples by name.
func (v *daemonView) metrics() (map[string]float64, error) {
	resp, err := v.hc.Get("http://127.0.0.1:" + strconv.Itoa(weftHealthzPort) + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = f
		}
	}
	return out, sc.Err()
}

func (v *daemonView) resyncs() float64 { return v.counter("weft_lease_watch_resyncs_total") }

// counter is weftd's unlabelled sample name, -1 when unknown (not weftd, or weftd
// does not export it: weft_probe_packets_sent_total when it does not probe).
func (v *daemonView) counter(name string) float64 {
	if !v.weft {
		return -1
	}
	m, err := v.metrics()
	if err != nil {
		return -1
	}
	if n, ok := m[name]; ok {
		return n
	}
	return -1
}

// dataPath is the set of peer subnets in the daemon's data path (kernel backends).
func (v *daemonView) dataPath() (map[netip.Prefix]bool, error) { return v.routes.list() }

// drift compares the daemon's data path with etcd once: the entries only in the data
// path (stale) and only in etcd (missing).
func (r *scaleRun) drift(ctx context.Context, v *daemonView, own netip.Prefix) (stale, missing int, err error) {
	want, err := r.etcdSubnets(ctx, own)
	if err != nil {
		return 0, 0, err
	}
	have, err := v.dataPath()
	if err != nil {
		return 0, 0, err
	}
	stale, missing = diff(have, want)
	return stale, missing, nil
}

// settled waits until the data path equals etcd (at most 30 s) and returns the
// difference then.
func (r *scaleRun) settled(ctx context.Context, v *daemonView, own netip.Prefix) (stale, missing int, err error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if stale, missing, err = r.drift(ctx, v, own); err != nil {
			return 0, 0, err
		}
		if (stale == 0 && missing == 0) || time.Now().After(deadline) {
			return stale, missing, nil
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (r *scaleRun) measure(ctx context.Context, s ScaleSubject, n int) ScalePoint {
	pt := newScalePoint(s, n)
	if err := r.measureInto(ctx, s, n, &pt); err != nil {
		pt.Errors = append(pt.Errors, err.Error())
	}
	return pt
}

// measureInto starts s on a fresh lab host and takes it through the run: ready, idle,
// churn, etcd restart, overtaken watch.
func (r *scaleRun) measureInto(ctx context.Context, s ScaleSubject, n int, pt *ScalePoint) error {
	if err := r.dropOthers(ctx); err != nil {
		return err
	}
	r.hostN++
	h, err := r.lab.AddHost(ctx, lab.HostSpec{Name: fmt.Sprintf("h%d", r.hostN)})
	if err != nil {
		return err
	}
	v := &daemonView{weft: s.Weft, alloc: r.o.Backend == "alloc", hc: &http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: h.NS.DialContext}}}
	if r.kernelPath() {
		if v.routes, err = watchRoutes(h.NS.Name, r.cfg.network, r.cfg.bits); err != nil {
			return err
		}
		defer v.routes.close()
	}
	spec := lab.DaemonSpec{Binary: s.Binary, Weft: s.Weft, Env: s.Env}
	if s.Weft {
		spec.Args = []string{"--healthz-ip=127.0.0.1", "--healthz-port=" + strconv.Itoa(weftHealthzPort)}
		if r.o.Sites {
			spec.Args = append(spec.Args, "--site="+simHome)
		}
	}
	if r.o.Backend == "wireguard" {
		env, err := r.lab.WireGuardEnv(h)
		if err != nil {
			return err
		}
		spec.Env = append(slices.Clone(spec.Env), env...)
	}
	t0 := time.Now()
	d, err := r.lab.Start(ctx, h, spec)
	if err != nil {
		return err
	}
	v.d = d
	defer d.Stop()
	own, err := r.ready(ctx, v, t0, pt)
	if err != nil {
		return err
	}
	if r.o.Sites && s.Weft {
		if err := r.sites(ctx, v, pt); err != nil {
			return err
		}
	}
	if err := r.measureChurn(ctx, v, own, pt); err != nil {
		return err
	}
	if !r.o.NoRestart {
		if err := r.restartEtcd(ctx, v, own, pt); err != nil {
			return err
		}
	}
	if !r.o.NoOvertake {
		if err := r.overtake(ctx, v, h.NS, own, pt); err != nil {
			return err
		}
	}
	if v.routes != nil {
		pt.WatchOverflows = v.routes.overflows()
	}
	if ok, err := d.Exited(); ok {
		return err
	}
	return nil
}

// ready waits for the daemon started at t0 to write subnet.env and, where they can be
// seen, to have every simulated host in its data path; then reads its RSS and its
// CPU over the Idle window. It returns the daemon's own subnet.
func (r *scaleRun) ready(ctx context.Context, v *daemonView, t0 time.Time, pt *ScalePoint) (netip.Prefix, error) {
	d := v.d
	env, err := d.WaitSubnetEnv(ctx, 5*time.Minute)
	if err != nil {
		return netip.Prefix{}, err
	}
	own := env.Subnet.Masked()
	want := len(r.sim)
	_, pt.PeersSeen = v.peers()
	if pt.PeersSeen {
		if err := poll(ctx, 10*time.Minute, 20*time.Millisecond, func() (bool, error) {
			if ok, err := d.Exited(); ok {
				return false, err
			}
			c, _ := v.peers()
			return c >= want, nil
		}); err != nil {
			c, _ := v.peers()
			return own, fmt.Errorf("%d of %d peers in the data path: %w", c, want, err)
		}
	}
	pt.ReadyS = time.Since(t0).Seconds()
	r.progress("  ready in %.2fs", pt.ReadyS)
	pid := d.Pid()
	pt.RSSMiB, _ = rssMiB(pid)
	sent0, w0 := v.counter("weft_probe_packets_sent_total"), time.Now()
	if pt.IdleCPUPct, err = cpuOver(ctx, pid, r.o.Idle); err != nil {
		return own, err
	}
	if sent1 := v.counter("weft_probe_packets_sent_total"); sent0 >= 0 && sent1 > sent0 {
		pt.ProbePktsPerS = (sent1 - sent0) / time.Since(w0).Seconds()
	}
	r.progress("  RSS %.1f MiB, idle CPU %.2f%%, probe packets %.1f/s", pt.RSSMiB, pt.IdleCPUPct, pt.ProbePktsPerS)
	return own, nil
}

// measureChurn runs the churn (with one compaction half way) and measures it: update
// latency, CPU, weftd's re-lists, the data path against etcd afterwards.
func (r *scaleRun) measureChurn(ctx context.Context, v *daemonView, own netip.Prefix, pt *ScalePoint) error {
	before := v.resyncs()
	err := pt.ScaleChurn.record(v.d.Pid(), r.o.Churn, func() ([]float64, int, int, error) { return r.churn(ctx, v, own) })
	if err != nil {
		return err
	}
	if after := v.resyncs(); before >= 0 && after >= 0 {
		pt.ResyncsChurn = after - before
	}
	if v.routes != nil {
		pt.StaleAfterChurn, pt.MissingAfterChurn, err = r.settled(ctx, v, own)
		if err != nil {
			return err
		}
	}
	r.progress("  churn: %d changes, p50 %.1f ms, p99 %.1f ms, missed %d, CPU %.1f%%, stale %d, missing %d",
		pt.ChurnOps, pt.P50Ms, pt.P99Ms, pt.Missed, pt.ChurnCPUPct, pt.StaleAfterChurn, pt.MissingAfterChurn)
	return nil
}

// restartEtcd stops and starts etcd under the daemon, then measures the re-lists,
// the CPU until it is idle again and that the data path still equals etcd.
func (r *scaleRun) restartEtcd(ctx context.Context, v *daemonView, own netip.Prefix, pt *ScalePoint) error {
	before := v.resyncs()
	pid := v.d.Pid()
	idle := pt.IdleCPUPct
	r.lab.Etcd().Stop()
	if err := r.lab.Etcd().Restart(ctx); err != nil {
		return fmt.Errorf("scale: etcd restart: %w", err)
	}
	back := time.Now()
	var err error
	if pt.RestartCPUPct, pt.SettleS, err = r.cpuUntilIdle(ctx, pid, back, idle); err != nil {
		return err
	}
	if after := v.resyncs(); before >= 0 && after >= 0 {
		pt.ResyncsRestart = after - before
	}
	if v.routes != nil {
		pt.StaleAfterRestart, pt.MissingAfterRestart, err = r.settled(ctx, v, own)
		if err != nil {
			return err
		}
	}
	r.progress("  etcd restart: %v re-lists, CPU %.2f%% over %s, idle again after %.0fs",
		pt.ResyncsRestart, pt.RestartCPUPct, r.o.Idle, pt.SettleS)
	return nil
}

// waysLeftWithin is how long after ready the peers' first ways may take to be left
// in a run with sites: each is kept for TryNew (13.1 s at 5,000 peers) and until the
// probes judged a round on it, and 5,000 first rounds wait their turn at the probe
// rate (the last way was left 71 s after ready).
const waysLeftWithin = 3 * time.Minute

// sites is a run with sites' part after ready: a weftd that probes (and so chooses
// ways; WEFT_PROBE=false keeps every peer direct) must leave every first way; then
// every subject's CPU is measured again, at least WaysSettled after ready, in the
// steady state (probes, the chooser's ticks, WireGuard's handshake attempts).
func (r *scaleRun) sites(ctx context.Context, v *daemonView, pt *ScalePoint) error {
	ready := time.Now()
	if pt.ProbePktsPerS > 0 {
		if err := r.waysLeft(ctx, v, pt); err != nil {
			return err
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(ready.Add(r.o.WaysSettled))):
	}
	var err error
	if pt.WaysCPUPct, err = cpuOver(ctx, v.d.Pid(), r.o.Idle); err != nil {
		return err
	}
	r.progress("  CPU %.2f%% over %s, %.0fs after ready", pt.WaysCPUPct, r.o.Idle, time.Since(ready).Seconds()-r.o.Idle.Seconds())
	return nil
}

// waysLeft waits, in a run with sites, until every simulated peer has left its
// first way (none answers), and reads how many of those ways the probes had not
// judged yet (weft_path_left_unprobed_total).
func (r *scaleRun) waysLeft(ctx context.Context, v *daemonView, pt *ScalePoint) error {
	want, start := float64(len(r.sim)), time.Now()
	err := poll(ctx, waysLeftWithin, 200*time.Millisecond, func() (bool, error) {
		if ok, err := v.d.Exited(); ok {
			return false, err
		}
		return v.counter("weft_path_changes_total") >= want, nil
	})
	if err != nil && ctx.Err() != nil {
		return err
	}
	pt.WaysS = time.Since(start).Seconds()
	pt.WaysLeft = int(max(v.counter("weft_path_changes_total"), 0))
	if n := v.counter("weft_path_left_unprobed_total"); n >= 0 {
		u := int(n)
		pt.Unprobed = &u
	}
	r.progress("  ways: %d of %d peers left their first way in %.1fs after ready, %v before the probes judged it",
		pt.WaysLeft, len(r.sim), pt.WaysS, deref(pt.Unprobed))
	if pt.WaysLeft < len(r.sim) {
		return fmt.Errorf("scale: %d of %d peers left their first way within %v (none answers)", pt.WaysLeft, len(r.sim), waysLeftWithin)
	}
	return nil
}

// deref is *p, or "unknown".
func deref(p *int) any {
	if p == nil {
		return "unknown"
	}
	return *p
}
