package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/lease"
)

// ScaleSubject is one daemon the scale benchmark measures.
type ScaleSubject struct {
	Name   string
	Binary string
	Weft   bool // weftd: /metrics is scraped (peers, re-lists)
}

// ScaleOptions configure a scale run.
type ScaleOptions struct {
	Sizes    []int  // numbers of simulated hosts, ascending
	Backend  string // vxlan (default), host-gw, udp or alloc
	Subjects []ScaleSubject
	Idle     time.Duration // idle CPU window; default 10 s
	Churn    time.Duration // lease changes for this long; default 60 s
	Rate     int           // lease changes per second; default 50
	// NoRestart leaves out the etcd restart after the churn.
	NoRestart bool
	// NoOvertake leaves out the compaction that overtakes the daemon's watch.
	NoOvertake bool
	StateFile  string
	Progress   io.Writer
}

// ScalePoint is one subject at one size.
type ScalePoint struct {
	Subject string `json:"subject"`
	Binary  string `json:"binary"`
	Hosts   int    `json:"hosts"`
	// ReadyS: daemon start to subnet.env written and every simulated host in its data
	// path (only subnet.env where the data path cannot be observed).
	ReadyS      float64 `json:"ready_s"`
	PeersSeen   bool    `json:"peers_observed"`
	RSSMiB      float64 `json:"rss_mib"`
	IdleCPUPct  float64 `json:"idle_cpu_pct"`
	ChurnOps    int     `json:"churn_ops"`
	ChurnRate   float64 `json:"churn_rate_per_s"`
	P50Ms       float64 `json:"update_p50_ms"`
	P99Ms       float64 `json:"update_p99_ms"`
	MaxMs       float64 `json:"update_max_ms"`
	Missed      int     `json:"missed_updates"`
	ChurnCPUPct float64 `json:"churn_cpu_pct"`
	// Stale entries are in the data path but not in etcd, missing ones the reverse;
	// after the churn and after the etcd restart.
	StaleAfterChurn     int     `json:"stale_after_churn"`
	MissingAfterChurn   int     `json:"missing_after_churn"`
	StaleAfterRestart   int     `json:"stale_after_restart"`
	MissingAfterRestart int     `json:"missing_after_restart"`
	ResyncsChurn        float64 `json:"resyncs_churn"`   // weftd re-lists during the churn (with one compaction); -1 unknown
	ResyncsRestart      float64 `json:"resyncs_restart"` // weftd re-lists after the etcd restart; -1 unknown
	RestartCPUPct       float64 `json:"restart_cpu_pct"` // CPU over the Idle window after etcd is back
	SettleS             float64 `json:"settle_s"`        // etcd back to the first 1 s with idle CPU
	// The overtaking compaction (see overtake): changes made while the daemon was
	// stopped, weftd's re-lists, CPU over the Idle window after SIGCONT, SIGCONT to
	// the first 1 s with idle CPU and to the data path equal to etcd, and the
	// difference then.
	OvertakeChanges      int     `json:"overtake_changes,omitempty"`
	ResyncsOvertake      float64 `json:"resyncs_overtake"`
	OvertakeCPUPct       float64 `json:"overtake_cpu_pct"`
	OvertakeSettleS      float64 `json:"overtake_settle_s"`
	OvertakeCatchUpS     float64 `json:"overtake_catch_up_s"`
	StaleAfterOvertake   int     `json:"stale_after_overtake"`
	MissingAfterOvertake int     `json:"missing_after_overtake"`
	WatchOverflows       int     `json:"watch_overflows,omitempty"`
	// Kubernetes mode (ScaleReport.Mode "kube"): RSS and weftd's heap in use at ready
	// (RSSMiB, HeapMiB) and after the rest (IdleS of the report); the daemon's CPU
	// seconds from start to ready and to the end; its whole run; its requests to the
	// API server by "verb resource"; the 1-minute load average at ready.
	HeapMiB     float64        `json:"heap_mib,omitempty"`
	RSSRestMiB  float64        `json:"rss_rest_mib,omitempty"`
	HeapRestMiB float64        `json:"heap_rest_mib,omitempty"`
	CPUReadyS   float64        `json:"cpu_ready_s,omitempty"`
	CPUS        float64        `json:"cpu_s,omitempty"`
	RunS        float64        `json:"run_s,omitempty"`
	Requests    map[string]int `json:"requests,omitempty"`
	Load1       float64        `json:"load1,omitempty"`
	Errors      []string       `json:"errors,omitempty"`
}

// ScaleReport is a scale run's result.
type ScaleReport struct {
	// Mode is "kube" for a run in Kubernetes mode (RunKubeScale), "" for etcd.
	Mode      string       `json:"mode,omitempty"`
	Started   time.Time    `json:"started"`
	Backend   string       `json:"backend"`
	Network   string       `json:"network"`
	SubnetLen int          `json:"subnet_len"`
	Kernel    string       `json:"kernel,omitempty"`
	CPUs      int          `json:"cpus,omitempty"`
	IdleS     float64      `json:"idle_s"`
	ChurnS    float64      `json:"churn_s"`
	Rate      int          `json:"rate_per_s"`
	Points    []ScalePoint `json:"points"`
}

// scaleSubnetLen is the longest-prefix SubnetLen needed for n simulated hosts plus
// the measured daemons in the lab's overlay /16 (at least /24, at most /30).
func scaleSubnetLen(n int) int {
	for l := 24; l < 30; l++ {
		if 1<<(l-16)-1 >= n+n/8+8 {
			return l
		}
	}
	return 30
}

// overlayCfg is the network config's Network and SubnetLen. (lease.ParseConfig is not
// used: the benchmark must be able to ask a daemon for a SubnetLen weft's own parser
// may refuse.)
type overlayCfg struct {
	network netip.Prefix
	bits    int
}

func (c overlayCfg) count() int { return 1 << (c.bits - c.network.Bits()) }

// subnet is the i-th subnet of the network.
func (c overlayCfg) subnet(i int) netip.Prefix {
	a := c.network.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(i) << (32 - c.bits)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), c.bits)
}

// simPublicIP is the PublicIP of simulated host i: 192.0.2.100-254, repeating. Nothing
// is ever sent to them (the lab's LAN1, on-link for host-gw); a real host has .10+.
func simPublicIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{192, 0, 2, byte(100 + i%155)}) }

func simValue(bt string, i int) string {
	a := lease.Attrs{PublicIP: simPublicIP(i), BackendType: bt}
	if bt == "vxlan" {
		a.BackendData = json.RawMessage(fmt.Sprintf(`{"VNI":1,"VtepMAC":"02:5e:%02x:%02x:%02x:%02x"}`,
			byte(i>>24), byte(i>>16), byte(i>>8), byte(i)))
	}
	v, _ := lease.EncodeAttrs(a)
	return string(v)
}

// scaleRun is the state of one run: the lab, an etcd client and the simulated leases.
type scaleRun struct {
	o      ScaleOptions
	lab    *lab.Lab
	cli    *clientv3.Client
	log    *zap.Logger
	cfg    overlayCfg
	prefix string
	grant  clientv3.LeaseID
	sim    map[netip.Prefix]int // subnet -> simulated host index
	nextID int
	rnd    *rand.Rand
	hostN  int
}

func (r *scaleRun) progress(format string, a ...any) {
	if r.o.Progress != nil {
		fmt.Fprintf(r.o.Progress, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
	}
}

// RunScale runs the scale benchmark: for each size, N simulated hosts' leases are
// written into a real etcd, then each subject runs alone on a fresh lab host and is
// measured (ready time, RSS, idle CPU, update latency under churn with a compaction,
// an etcd restart). Subjects failing are recorded in their point's Errors.
func RunScale(ctx context.Context, o ScaleOptions, log *zap.Logger) (*ScaleReport, error) {
	if o.Backend == "" {
		o.Backend = "vxlan"
	}
	switch o.Backend {
	case "vxlan", "host-gw", "udp", "alloc":
	default:
		return nil, fmt.Errorf("scale: backend %q is none of vxlan, host-gw, udp, alloc", o.Backend)
	}
	if len(o.Sizes) == 0 || len(o.Subjects) == 0 {
		return nil, errors.New("scale: no sizes or no subjects")
	}
	if o.Idle <= 0 {
		o.Idle = 10 * time.Second
	}
	if o.Churn <= 0 {
		o.Churn = time.Minute
	}
	if o.Rate <= 0 {
		o.Rate = 50
	}
	maxN := 0
	for _, n := range o.Sizes {
		maxN = max(maxN, n)
	}
	bits := scaleSubnetLen(maxN)
	cfgJSON := fmt.Sprintf(`{"Network":%q,"SubnetLen":%d,"Backend":{"Type":%q}}`, lab.Overlay.String(), bits, o.Backend)
	cfg := overlayCfg{network: lab.Overlay, bits: bits}
	if cfg.count()-1 < maxN+8 {
		return nil, fmt.Errorf("scale: %d hosts do not fit in %v with /%d subnets", maxN, lab.Overlay, bits)
	}
	rep := &ScaleReport{Started: time.Now(), Backend: o.Backend, Network: lab.Overlay.String(), SubnetLen: bits,
		Kernel: kernel(), CPUs: runtime.NumCPU(), IdleS: o.Idle.Seconds(), ChurnS: o.Churn.Seconds(), Rate: o.Rate}

	l, err := lab.New(ctx, lab.Spec{Prefix: "wsc", StateFile: o.StateFile}, log)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{strings.TrimPrefix(lab.EtcdEndpoint, "http://")},
		DialTimeout: 10 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return l.Router().DialContext(ctx, "tcp", addr)
		})},
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("scale: etcd client: %w", err)
	}
	defer cli.Close()
	r := &scaleRun{o: o, lab: l, cli: cli, log: log, cfg: cfg, prefix: lease.DefaultPrefix,
		sim: map[netip.Prefix]int{}, rnd: rand.New(rand.NewSource(1))}
	if _, err := cli.Put(ctx, r.prefix+"/config", cfgJSON); err != nil {
		return nil, fmt.Errorf("scale: network config: %w", err)
	}
	g, err := cli.Grant(ctx, 24*3600)
	if err != nil {
		return nil, fmt.Errorf("scale: etcd lease: %w", err)
	}
	r.grant = g.ID
	for _, n := range o.Sizes {
		r.progress("%d simulated hosts: writing leases", n)
		if err := r.populate(ctx, n); err != nil {
			return rep, err
		}
		for _, s := range o.Subjects {
			r.progress("%d hosts: %s", n, s.Name)
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

func (r *scaleRun) key(p netip.Prefix) string { return r.prefix + "/subnets/" + lease.SubnetKey(p) }

// populate makes the simulated leases exactly the first n subnets after the first
// (and nothing else: leases of daemons measured before are dropped).
func (r *scaleRun) populate(ctx context.Context, n int) error {
	dir := r.prefix + "/subnets/"
	if _, err := r.cli.Delete(ctx, dir, clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("scale: clear leases: %w", err)
	}
	clear(r.sim)
	var ops []clientv3.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := r.cli.Txn(ctx).Then(ops...).Commit()
		ops = ops[:0]
		if err != nil {
			return fmt.Errorf("scale: write leases: %w", err)
		}
		return nil
	}
	for i := 1; i <= n; i++ {
		p := r.cfg.subnet(i)
		r.nextID++
		r.sim[p] = r.nextID
		ops = append(ops, clientv3.OpPut(r.key(p), simValue(r.o.Backend, r.nextID), clientv3.WithLease(r.grant)))
		if len(ops) == 100 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// dropOthers deletes every lease that is not a simulated host's (a daemon measured
// before left its own).
func (r *scaleRun) dropOthers(ctx context.Context) error {
	resp, err := r.cli.Get(ctx, r.prefix+"/subnets/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("scale: list leases: %w", err)
	}
	for _, kv := range resp.Kvs {
		p, err := lease.ParseSubnetKey(string(kv.Key))
		if err != nil {
			continue
		}
		if _, ok := r.sim[p]; !ok {
			if _, err := r.cli.Delete(ctx, string(kv.Key)); err != nil {
				return fmt.Errorf("scale: drop lease %s: %w", kv.Key, err)
			}
		}
	}
	return nil
}

// etcdSubnets is every lease's subnet in etcd but own.
func (r *scaleRun) etcdSubnets(ctx context.Context, own netip.Prefix) (map[netip.Prefix]bool, error) {
	resp, err := r.cli.Get(ctx, r.prefix+"/subnets/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("scale: list leases: %w", err)
	}
	out := map[netip.Prefix]bool{}
	for _, kv := range resp.Kvs {
		if p, err := lease.ParseSubnetKey(string(kv.Key)); err == nil && p != own {
			out[p] = true
		}
	}
	return out, nil
}

func diff(have, want map[netip.Prefix]bool) (stale, missing int) {
	for p := range have {
		if !want[p] {
			stale++
		}
	}
	for p := range want {
		if !have[p] {
			missing++
		}
	}
	return stale, missing
}

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

func (v *daemonView) resyncs() float64 {
	if !v.weft {
		return -1
	}
	m, err := v.metrics()
	if err != nil {
		return -1
	}
	if n, ok := m["weft_lease_watch_resyncs_total"]; ok {
		return n
	}
	return -1
}

// dataPath is the set of peer subnets in the daemon's data path (kernel backends).
func (v *daemonView) dataPath() (map[netip.Prefix]bool, error) { return v.routes.list() }

func (r *scaleRun) measure(ctx context.Context, s ScaleSubject, n int) ScalePoint {
	pt := ScalePoint{Subject: s.Name, Binary: s.Binary, Hosts: n, ResyncsChurn: -1, ResyncsRestart: -1, SettleS: -1,
		ResyncsOvertake: -1, OvertakeSettleS: -1, OvertakeCatchUpS: -1}
	if err := r.measureInto(ctx, s, n, &pt); err != nil {
		pt.Errors = append(pt.Errors, err.Error())
	}
	return pt
}

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
	spec := lab.DaemonSpec{Binary: s.Binary, Weft: s.Weft}
	if s.Weft {
		spec.Args = []string{"--healthz-ip=127.0.0.1", "--healthz-port=" + strconv.Itoa(weftHealthzPort)}
	}
	t0 := time.Now()
	d, err := r.lab.Start(ctx, h, spec)
	if err != nil {
		return err
	}
	v.d = d
	defer d.Stop()
	env, err := d.WaitSubnetEnv(ctx, 5*time.Minute)
	if err != nil {
		return err
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
			return fmt.Errorf("%d of %d peers in the data path: %w", c, want, err)
		}
	}
	pt.ReadyS = time.Since(t0).Seconds()
	r.progress("  ready in %.2fs", pt.ReadyS)
	pid := d.Pid()
	pt.RSSMiB, _ = rssMiB(pid)
	if pt.IdleCPUPct, err = cpuOver(ctx, pid, r.o.Idle); err != nil {
		return err
	}
	r.progress("  RSS %.1f MiB, idle CPU %.2f%%", pt.RSSMiB, pt.IdleCPUPct)

	// Churn, with one compaction half way.
	before := v.resyncs()
	c0, _ := lab.ProcCPU(pid)
	w0 := time.Now()
	lat, ops, missed, err := r.churn(ctx, v, own)
	if err != nil {
		return err
	}
	c1, _ := lab.ProcCPU(pid)
	pt.ChurnCPUPct = 100 * (c1 - c0).Seconds() / time.Since(w0).Seconds()
	pt.ChurnOps, pt.Missed = ops, missed
	pt.ChurnRate = float64(ops) / r.o.Churn.Seconds()
	if len(lat) > 0 {
		pt.P50Ms, pt.P99Ms, pt.MaxMs = Percentile(lat, 50), Percentile(lat, 99), Percentile(lat, 100)
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
		ops, pt.P50Ms, pt.P99Ms, missed, pt.ChurnCPUPct, pt.StaleAfterChurn, pt.MissingAfterChurn)
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

// settled waits until the data path equals etcd (at most 30 s) and returns the
// difference then.
func (r *scaleRun) settled(ctx context.Context, v *daemonView, own netip.Prefix) (stale, missing int, err error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		want, err := r.etcdSubnets(ctx, own)
		if err != nil {
			return 0, 0, err
		}
		have, err := v.dataPath()
		if err != nil {
			return 0, 0, err
		}
		stale, missing = diff(have, want)
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

// churn changes leases at Rate per second for Churn: each change deletes a simulated
// host's lease or adds one in a free subnet, alternately, so N stays. On kernel
// backends each change's latency runs from just before the etcd write to the route's
// netlink event; a change whose route event never came within 10 s is missed.
func (r *scaleRun) churn(ctx context.Context, v *daemonView, own netip.Prefix) (lat []float64, ops, missed int, err error) {
	var mu sync.Mutex
	pending := 0
	free, simList := r.freeAndLeased(ctx, own)
	tick := time.NewTicker(time.Second / time.Duration(r.o.Rate))
	defer tick.Stop()
	end := time.Now().Add(r.o.Churn)
	compactAt := time.Now().Add(r.o.Churn / 2)
	compacted := false
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return nil, 0, 0, ctx.Err()
		case <-tick.C:
		}
		if !compacted && time.Now().After(compactAt) {
			compacted = true
			g, err := r.cli.Get(ctx, "compact-probe")
			if err != nil {
				return nil, 0, 0, fmt.Errorf("scale: etcd revision: %w", err)
			}
			if _, err := r.cli.Compact(ctx, g.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
				return nil, 0, 0, fmt.Errorf("scale: compact: %w", err)
			}
			r.progress("  compacted etcd at revision %d", g.Header.Revision)
		}
		add := ops%2 == 1 || len(simList) == 0
		var p netip.Prefix
		if add {
			// From the front of the free queue: a subnet deleted during the churn goes
			// to its back, so an add never races the delete of the same key (the
			// daemon could rightly coalesce the two into no change at all).
			j := r.rnd.Intn(min(len(free), 64))
			p = free[j]
			free = append(free[:j], free[j+1:]...)
		} else {
			// The oldest leases go first, for the same reason.
			j := r.rnd.Intn(min(len(simList), 64))
			p = simList[j]
			simList = append(simList[:j], simList[j+1:]...)
		}
		t := time.Now()
		if v.routes != nil {
			mu.Lock()
			pending++
			mu.Unlock()
			v.routes.expect(p, add, func(at time.Time) {
				mu.Lock()
				lat = append(lat, float64(at.Sub(t).Microseconds())/1000)
				pending--
				mu.Unlock()
			})
		}
		if add {
			r.nextID++
			r.sim[p] = r.nextID
			simList = append(simList, p)
			_, err = r.cli.Put(ctx, r.key(p), simValue(r.o.Backend, r.nextID), clientv3.WithLease(r.grant))
		} else {
			delete(r.sim, p)
			free = append(free, p)
			_, err = r.cli.Delete(ctx, r.key(p))
		}
		if err != nil {
			return nil, 0, 0, fmt.Errorf("scale: churn write: %w", err)
		}
		ops++
	}
	if v.routes == nil {
		return nil, ops, 0, nil
	}
	_ = poll(ctx, 10*time.Second, 20*time.Millisecond, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return pending == 0, nil
	})
	mu.Lock()
	missed = pending
	out := append([]float64(nil), lat...)
	mu.Unlock()
	return out, ops, missed, nil
}

// freeAndLeased returns the subnets no lease holds (nor own) and the simulated
// hosts' subnets.
func (r *scaleRun) freeAndLeased(ctx context.Context, own netip.Prefix) (free, sim []netip.Prefix) {
	taken := map[netip.Prefix]bool{own: true}
	for p := range r.sim {
		taken[p] = true
	}
	if cur, err := r.etcdSubnets(ctx, own); err == nil {
		for p := range cur {
			taken[p] = true
		}
	}
	for i := 1; i < r.cfg.count(); i++ {
		if p := r.cfg.subnet(i); !taken[p] {
			free = append(free, p)
		}
	}
	sim = make([]netip.Prefix, 0, len(r.sim))
	for p := range r.sim {
		sim = append(sim, p)
	}
	return free, sim
}

// overtake makes an etcd compaction overtake the daemon's watch, as a daemon cut off
// from etcd for a while meets it: the daemon is stopped (SIGSTOP), Rate lease changes
// are written (half deletes, half adds), etcd is compacted at the revision after them,
// the daemon's TCP connections to etcd are destroyed (ss -K: the events queued for it
// are lost, as over a broken link) and the daemon continues (SIGCONT). Its watch must
// resume from a compacted revision: it has to re-list (weftd's re-lists are counted;
// one is right, more is a loop). Then CPU over the Idle window, when it is idle again,
// and when the data path equals etcd.
func (r *scaleRun) overtake(ctx context.Context, v *daemonView, ns *netns.NS, own netip.Prefix, pt *ScalePoint) error {
	before := v.resyncs()
	pid := v.d.Pid()
	proc, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("scale: stop the daemon: %w", err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = proc.Signal(syscall.SIGCONT)
		}
	}()
	// What etcd sends from now on must not reach the daemon's socket: data queued
	// there would still be read after ss -K. An nftables table of the benchmark's own
	// drops it on the way in.
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(lab.EtcdEndpoint, "http://"))
	nft := func(args ...string) error {
		if out, err := ns.Run(ctx, "nft", args...); err != nil {
			return fmt.Errorf("scale: nft %v: %w: %s", args, err, out)
		}
		return nil
	}
	unblock := func() error { return nft("delete table inet weftbench") }
	for _, cmd := range []string{"add table inet weftbench",
		"add chain inet weftbench in { type filter hook input priority -10 ; }",
		"add rule inet weftbench in ip saddr " + host + " tcp sport " + port + " drop"} {
		if err := nft(cmd); err != nil {
			_ = unblock()
			return err
		}
	}
	blocked := true
	defer func() {
		if blocked {
			_ = unblock()
		}
	}()
	free, simList := r.freeAndLeased(ctx, own)
	for i := range r.o.Rate {
		if i%2 == 0 && len(simList) > 0 {
			j := r.rnd.Intn(len(simList))
			p := simList[j]
			simList = append(simList[:j], simList[j+1:]...)
			delete(r.sim, p)
			if _, err := r.cli.Delete(ctx, r.key(p)); err != nil {
				return fmt.Errorf("scale: overtake write: %w", err)
			}
		} else {
			j := r.rnd.Intn(len(free))
			p := free[j]
			free = append(free[:j], free[j+1:]...)
			r.nextID++
			r.sim[p] = r.nextID
			if _, err := r.cli.Put(ctx, r.key(p), simValue(r.o.Backend, r.nextID), clientv3.WithLease(r.grant)); err != nil {
				return fmt.Errorf("scale: overtake write: %w", err)
			}
		}
		pt.OvertakeChanges++
	}
	g, err := r.cli.Get(ctx, "compact-probe")
	if err != nil {
		return fmt.Errorf("scale: etcd revision: %w", err)
	}
	if _, err := r.cli.Compact(ctx, g.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		return fmt.Errorf("scale: compact: %w", err)
	}
	if out, err := ns.Run(ctx, "ss", "-K", "-t", "dst", host, "dport", "=", port); err != nil {
		return fmt.Errorf("scale: cut the daemon's etcd connections: %w: %s", err, out)
	}
	if err := unblock(); err != nil {
		return err
	}
	blocked = false
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("scale: continue the daemon: %w", err)
	}
	stopped = false
	back := time.Now()
	r.progress("  %d changes while stopped, compacted at revision %d, connections cut, continued",
		pt.OvertakeChanges, g.Header.Revision)
	var catchUp sync.WaitGroup
	if v.routes != nil {
		catchUp.Add(1)
		go func() {
			defer catchUp.Done()
			var stale, missing int
			_ = poll(ctx, 30*time.Second, 20*time.Millisecond, func() (bool, error) {
				want, err := r.etcdSubnets(ctx, own)
				if err != nil {
					return false, err
				}
				have, err := v.dataPath()
				if err != nil {
					return false, err
				}
				stale, missing = diff(have, want)
				return stale == 0 && missing == 0, nil
			})
			if stale == 0 && missing == 0 {
				pt.OvertakeCatchUpS = time.Since(back).Seconds()
			}
		}()
	}
	pt.OvertakeCPUPct, pt.OvertakeSettleS, err = r.cpuUntilIdle(ctx, pid, back, pt.IdleCPUPct)
	catchUp.Wait()
	if err != nil {
		return err
	}
	if after := v.resyncs(); before >= 0 && after >= 0 {
		pt.ResyncsOvertake = after - before
	}
	if v.routes != nil {
		// The catch-up wait above was the chance to settle: compare once.
		want, err := r.etcdSubnets(ctx, own)
		if err != nil {
			return err
		}
		have, err := v.dataPath()
		if err != nil {
			return err
		}
		pt.StaleAfterOvertake, pt.MissingAfterOvertake = diff(have, want)
	}
	r.progress("  overtaken watch: %v re-lists, data path = etcd after %.2fs, CPU %.2f%% over %s, idle again after %.0fs, stale %d, missing %d",
		pt.ResyncsOvertake, pt.OvertakeCatchUpS, pt.OvertakeCPUPct, r.o.Idle, pt.OvertakeSettleS,
		pt.StaleAfterOvertake, pt.MissingAfterOvertake)
	return nil
}

// cpuUntilIdle samples pid's CPU every second for the Idle window from back: the
// CPU over the window, and the start of the first second at idle (at most twice the
// idle CPU or one point above it; -1 if none).
func (r *scaleRun) cpuUntilIdle(ctx context.Context, pid int, back time.Time, idle float64) (pct, settleS float64, err error) {
	c0, err := lab.ProcCPU(pid)
	if err != nil {
		return 0, -1, err
	}
	t0 := time.Now()
	settleS = -1
	prev := c0
	for time.Since(back) < r.o.Idle {
		select {
		case <-ctx.Done():
			return 0, -1, ctx.Err()
		case <-time.After(time.Second):
		}
		c, err := lab.ProcCPU(pid)
		if err != nil {
			return 0, -1, err
		}
		if p := 100 * (c - prev).Seconds(); settleS < 0 && p <= max(2*idle, idle+1) {
			settleS = time.Since(back).Seconds() - 1
		}
		prev = c
	}
	return 100 * (prev - c0).Seconds() / time.Since(t0).Seconds(), settleS, nil
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

func poll(ctx context.Context, timeout, every time.Duration, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := f()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// cpuOver returns pid's CPU use over d in percent of one core.
func cpuOver(ctx context.Context, pid int, d time.Duration) (float64, error) {
	c0, err := lab.ProcCPU(pid)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	c1, err := lab.ProcCPU(pid)
	if err != nil {
		return 0, err
	}
	return 100 * (c1 - c0).Seconds() / time.Since(t0).Seconds(), nil
}

// rssMiB reads VmRSS from /proc/<pid>/status.
func rssMiB(pid int) (float64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("rss: %w", err)
	}
	return ParseVmRSS(string(data))
}

// ErrNoVmRSS is returned for a /proc/<pid>/status without a VmRSS line.
var ErrNoVmRSS = errors.New("no VmRSS line")

// ParseVmRSS returns the VmRSS of a /proc/<pid>/status text in MiB.
func ParseVmRSS(status string) (float64, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("%w: %q", ErrNoVmRSS, line)
			}
			kb, err := strconv.ParseUint(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%w: %w", ErrNoVmRSS, err)
			}
			return float64(kb) / 1024, nil
		}
	}
	return 0, ErrNoVmRSS
}
