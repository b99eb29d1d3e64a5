package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/lease"
)

// ScaleSubject is one daemon the scale benchmark measures.
type ScaleSubject struct {
	Name   string
	Binary string
	Weft   bool // weftd: /metrics is scraped (peers, re-lists)
	// Env is added to the daemon's environment ("WEFT_PROBE=false").
	Env []string
}

// ScaleOptions configure a scale run.
type ScaleOptions struct {
	Sizes   []int  // numbers of simulated hosts, ascending
	Backend string // vxlan (default), host-gw, udp, alloc or wireguard
	// Sites (wireguard): the measured weftd runs with --site and every simulated
	// host is in another site, so each peer's way is chosen on evidence; none
	// answers, so each leaves its first way on the verdict.
	Sites bool
	// WaysSettled (sites): the CPU is measured again once every first way was left
	// and at least this long after ready; default 40 s.
	WaysSettled time.Duration
	Subjects    []ScaleSubject
	Idle        time.Duration // idle CPU window; default 10 s
	Churn       time.Duration // lease changes for this long; default 60 s
	Rate        int           // lease changes per second; default 50
	// NoRestart leaves out the etcd restart after the churn.
	NoRestart bool
	// NoOvertake leaves out the compaction that overtakes the daemon's watch.
	NoOvertake bool
	StateFile  string
	Progress   io.Writer
}

// ScalePoint is one subject at one size. Its parts are embedded: their fields are
// ScalePoint's own in Go and in the JSON (same keys, same order as one flat struct).
type ScalePoint struct {
	Subject string `json:"subject"`
	Binary  string `json:"binary"`
	Hosts   int    `json:"hosts"`
	ScaleReady
	ScaleSites
	ScaleChurn
	ScaleRecovery
	ScaleOvertake
	WatchOverflows int `json:"watch_overflows,omitempty"` // errors of the benchmark's route subscription (overflows)
	ScaleKube
	Errors []string `json:"errors,omitempty"`
}

// newScalePoint is s's point at n hosts before it is measured: the figures that can
// be unknown say so (-1).
func newScalePoint(s ScaleSubject, n int) ScalePoint {
	pt := ScalePoint{Subject: s.Name, Binary: s.Binary, Hosts: n}
	pt.ResyncsChurn, pt.ResyncsRestart, pt.SettleS = -1, -1, -1
	pt.ResyncsOvertake, pt.OvertakeSettleS, pt.OvertakeCatchUpS = -1, -1, -1
	return pt
}

// ScaleReady is a daemon at ready.
type ScaleReady struct {
	// ReadyS: daemon start to subnet.env written and every simulated host in its data
	// path (only subnet.env where the data path cannot be observed).
	ReadyS     float64 `json:"ready_s"`
	PeersSeen  bool    `json:"peers_observed"`
	RSSMiB     float64 `json:"rss_mib"`
	IdleCPUPct float64 `json:"idle_cpu_pct"`
	// ProbePktsPerS is weftd's probe packets sent per second over the Idle window
	// (weft_probe_packets_sent_total); 0 when it sends none or is not weftd.
	ProbePktsPerS float64 `json:"probe_packets_per_s,omitempty"`
}

// ScaleSites is what a run with sites adds (ScaleOptions.Sites): how the peers'
// first ways were left. Every simulated host is silent, so every peer leaves its
// first way once it has had its time (TryNew), and the probes should have judged it
// by then: Unprobed is the goal's "no direct way left before it was probed".
type ScaleSites struct {
	// WaysLeft: the moves of a way (weft_path_changes_total) once every peer had
	// left its first way, WaysS seconds after ready (or at the 3-minute limit).
	WaysLeft int     `json:"ways_left,omitempty"`
	WaysS    float64 `json:"ways_s,omitempty"`
	// Unprobed: the ways left before a round of probes on them was judged
	// (weft_path_left_unprobed_total); nil when not measured.
	Unprobed *int `json:"ways_left_unprobed,omitempty"`
	// WaysCPUPct: the daemon's CPU over the Idle window once every first way has
	// been left, and at least WaysSettled (40 s) after ready.
	WaysCPUPct float64 `json:"ways_cpu_pct,omitempty"`
}

// ScaleChurn is the lease churn: changes made, their rate, update latency, missed
// updates and the daemon's CPU meanwhile.
type ScaleChurn struct {
	ChurnOps    int     `json:"churn_ops"`
	ChurnRate   float64 `json:"churn_rate_per_s"`
	P50Ms       float64 `json:"update_p50_ms"`
	P99Ms       float64 `json:"update_p99_ms"`
	MaxMs       float64 `json:"update_max_ms"`
	Missed      int     `json:"missed_updates"`
	ChurnCPUPct float64 `json:"churn_cpu_pct"`
}

// ScaleRecovery is how the daemon came through the churn (with its compaction) and
// the etcd restart.
type ScaleRecovery struct {
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
}

// ScaleOvertake is the overtaking compaction (see overtake): changes made while the
// daemon was stopped, weftd's re-lists, CPU over the Idle window after SIGCONT,
// SIGCONT to the first 1 s with idle CPU and to the data path equal to etcd, and the
// difference then.
type ScaleOvertake struct {
	OvertakeChanges      int     `json:"overtake_changes,omitempty"`
	ResyncsOvertake      float64 `json:"resyncs_overtake"`
	OvertakeCPUPct       float64 `json:"overtake_cpu_pct"`
	OvertakeSettleS      float64 `json:"overtake_settle_s"`
	OvertakeCatchUpS     float64 `json:"overtake_catch_up_s"`
	StaleAfterOvertake   int     `json:"stale_after_overtake"`
	MissingAfterOvertake int     `json:"missing_after_overtake"`
}

// ScaleKube is what Kubernetes mode (ScaleReport.Mode "kube") adds: RSS and weftd's
// heap in use at ready (RSSMiB, HeapMiB) and after the rest (IdleS of the report); the
// daemon's CPU seconds from start to ready and to the end; its whole run; its requests
// to the API server by "verb resource"; the 1-minute load average at ready.
type ScaleKube struct {
	HeapMiB     float64        `json:"heap_mib,omitempty"`
	RSSRestMiB  float64        `json:"rss_rest_mib,omitempty"`
	HeapRestMiB float64        `json:"heap_rest_mib,omitempty"`
	CPUReadyS   float64        `json:"cpu_ready_s,omitempty"`
	CPUS        float64        `json:"cpu_s,omitempty"`
	RunS        float64        `json:"run_s,omitempty"`
	Requests    map[string]int `json:"requests,omitempty"`
	Load1       float64        `json:"load1,omitempty"`
}

// ScaleReport is a scale run's result.
type ScaleReport struct {
	// Mode is "kube" for a run in Kubernetes mode (RunKubeScale), "" for etcd.
	Mode    string    `json:"mode,omitempty"`
	Started time.Time `json:"started"`
	Backend string    `json:"backend"`
	Sites   bool      `json:"sites,omitempty"`
	// SettledS: with sites, when after ready the CPU was measured again.
	SettledS  float64      `json:"ways_settled_s,omitempty"`
	Network   string       `json:"network"`
	SubnetLen int          `json:"subnet_len"`
	Kernel    string       `json:"kernel,omitempty"`
	CPUs      int          `json:"cpus,omitempty"`
	IdleS     float64      `json:"idle_s"`
	ChurnS    float64      `json:"churn_s"`
	Rate      int          `json:"rate_per_s"`
	Points    []ScalePoint `json:"points"`
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

// withDefaults checks o and fills in what it leaves out.
func (o ScaleOptions) withDefaults() (ScaleOptions, error) {
	if o.Backend == "" {
		o.Backend = "vxlan"
	}
	switch o.Backend {
	case "vxlan", "host-gw", "udp", "alloc", "wireguard":
	default:
		return o, fmt.Errorf("scale: backend %q is none of vxlan, host-gw, udp, alloc, wireguard", o.Backend)
	}
	if o.Sites && o.Backend != "wireguard" {
		return o, fmt.Errorf("scale: sites are for the wireguard backend, not %s", o.Backend)
	}
	if len(o.Sizes) == 0 || len(o.Subjects) == 0 {
		return o, errors.New("scale: no sizes or no subjects")
	}
	if o.Idle <= 0 {
		o.Idle = 10 * time.Second
	}
	if o.WaysSettled <= 0 {
		o.WaysSettled = 40 * time.Second
	}
	if o.Churn <= 0 {
		o.Churn = time.Minute
	}
	if o.Rate <= 0 {
		o.Rate = 50
	}
	return o, nil
}

// RunScale runs the scale benchmark: for each size, N simulated hosts' leases are
// written into a real etcd, then each subject runs alone on a fresh lab host and is
// measured (ready time, RSS, idle CPU, update latency under churn with a compaction,
// an etcd restart). Subjects failing are recorded in their point's Errors.
func RunScale(ctx context.Context, o ScaleOptions, log *zap.Logger) (*ScaleReport, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	maxN := 0
	for _, n := range o.Sizes {
		maxN = max(maxN, n)
	}
	bits := scaleSubnetLen(maxN)
	cfg := overlayCfg{network: lab.Overlay, bits: bits}
	if cfg.count()-1 < maxN+8 {
		return nil, fmt.Errorf("scale: %d hosts do not fit in %v with /%d subnets", maxN, lab.Overlay, bits)
	}
	rep := &ScaleReport{Started: time.Now(), Backend: o.Backend, Sites: o.Sites, Network: lab.Overlay.String(), SubnetLen: bits,
		Kernel: kernel(), CPUs: runtime.NumCPU(), IdleS: o.Idle.Seconds(), ChurnS: o.Churn.Seconds(), Rate: o.Rate}
	if o.Sites {
		rep.SettledS = o.WaysSettled.Seconds()
	}

	l, err := lab.New(ctx, lab.Spec{Prefix: "wsc", StateFile: o.StateFile}, log)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	cli, err := labEtcdClient(l)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	r := &scaleRun{o: o, lab: l, cli: cli, log: log, cfg: cfg, prefix: lease.DefaultPrefix,
		sim: map[netip.Prefix]int{}, rnd: rand.New(rand.NewSource(1))}
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
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

// labEtcdClient is a client of the lab's etcd, dialled through the lab's router.
func labEtcdClient(l *lab.Lab) (*clientv3.Client, error) {
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
	return cli, nil
}

// setup writes the network config and grants the etcd lease the simulated hosts'
// leases are attached to.
func (r *scaleRun) setup(ctx context.Context) error {
	cfgJSON := fmt.Sprintf(`{"Network":%q,"SubnetLen":%d,"Backend":{"Type":%q}}`, r.cfg.network.String(), r.cfg.bits, r.o.Backend)
	if _, err := r.cli.Put(ctx, r.prefix+"/config", cfgJSON); err != nil {
		return fmt.Errorf("scale: network config: %w", err)
	}
	g, err := r.cli.Grant(ctx, 24*3600)
	if err != nil {
		return fmt.Errorf("scale: etcd lease: %w", err)
	}
	r.grant = g.ID
	return nil
}
