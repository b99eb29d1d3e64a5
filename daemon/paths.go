package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/paths"
)

// PeersConditionType is the node condition weftd sets in Kubernetes mode.
const PeersConditionType = "WeftPeersReachable"

// How often the node condition may be patched: at once (but not within
// conditionFlipEvery of the last patch) when it flips, else when its message changes
// (peers named, their count), at most every conditionEvery. A node's status is read by every controller
// watching Nodes: thousands of nodes must not patch it at every change of a peer.
const (
	conditionFlipEvery = 10 * time.Second
	conditionEvery     = time.Minute
)

// startProber starts probing the backend's paths (when it lists them and probing is
// on) until ctx ends; wg counts its goroutines. In Kubernetes mode it also keeps our
// node's WeftPeersReachable condition.
func (d *daemon) startProber(ctx context.Context, be encap.Backend, mgr lease.Manager, spawn func(func())) {
	pl, ok := be.(encap.PathLister)
	if !ok || d.cfg.Probe.Off {
		return
	}
	cfg := d.cfg.Probe.Config
	cfg.ObserveRTT = func(rtt time.Duration) { d.probeRTT.Observe(rtt.Seconds()) }
	pr := paths.New(cfg, pl, d.log.Named("paths"))
	d.prober.Store(pr)
	spawn(func() { _ = pr.Run(ctx) })
	if cs, ok := mgr.(lease.NodeConditionSetter); ok {
		spawn(func() { d.keepCondition(ctx, pr, cs) })
	}
}

// keepCondition sets our node's condition from the probes' summary until ctx ends.
func (d *daemon) keepCondition(ctx context.Context, pr *paths.Prober, cs lease.NodeConditionSetter) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last conditionPatch
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rep := pr.Report()
		if len(rep.Peers) > 0 && allUnknown(rep) {
			continue // nothing found yet: say nothing rather than something untrue
		}
		ok, msg := rep.Summary()
		next := conditionPatch{at: time.Now(), ok: ok, msg: msg, peers: len(rep.Peers)}
		if !conditionDue(last, next) {
			continue
		}
		c := lease.NodeCondition{Type: PeersConditionType, OK: ok, Reason: "PeersReachable", Message: msg}
		if !ok {
			c.Reason = "PeersDown"
		}
		if err := cs.SetNodeCondition(ctx, c); err != nil {
			if ctx.Err() == nil {
				d.log.Warn("cannot set the node condition", zap.String("type", c.Type), zap.Error(err))
			}
			last.at = next.at // retried after the same wait
			continue
		}
		d.log.Info("node condition set", zap.String("type", c.Type), zap.Bool("ok", ok), zap.String("message", msg))
		last = next
	}
}

// conditionPatch is what one patch of the node condition said, and when (the zero
// value: none yet).
type conditionPatch struct {
	at    time.Time
	ok    bool
	msg   string
	peers int // peers in the summary
}

// conditionDue reports whether the condition next should be patched, last being the
// one patched before it: the first at once; a flip at once but not within
// conditionFlipEvery of the last patch; the first word on peers after a patch that
// knew none ("0 of 0": our first list of the leases came after the first tick) as a
// flip; any other change of the message at most every conditionEvery.
func conditionDue(last, next conditionPatch) bool {
	since := next.at.Sub(last.at)
	switch {
	case last.at.IsZero() || last.msg == "":
		return true
	case next.ok != last.ok, last.peers == 0 && next.peers > 0:
		return since >= conditionFlipEvery
	case next.msg != last.msg:
		return since >= conditionEvery
	}
	return false
}

func allUnknown(r paths.Report) bool {
	for _, p := range r.Peers {
		if p.State != paths.StateUnknown {
			return false
		}
	}
	return true
}

// servePeers answers GET /peers: every peer as probed (an empty list when nothing is
// probed: probing off, or a backend that programs no path).
func (d *daemon) servePeers(w http.ResponseWriter, _ *http.Request) {
	rep := paths.Report{Peers: []paths.Peer{}}
	if pr := d.prober.Load(); pr != nil {
		rep = pr.Report()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rep)
}

// newProbeRTT is the histogram of round trips through the tunnels.
func newProbeRTT() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "weft_probe_rtt_seconds",
		Help: "Round trips of the probes through the tunnels to the peers (all peers together).",
		// 50 µs to about 3.3 s.
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 17),
	})
}

// pathsCollector reports the probes at scrape time.
type pathsCollector struct {
	d                   *daemon
	state, sent, unsent *prometheus.Desc
}

func newPathsCollector(d *daemon) *pathsCollector {
	return &pathsCollector{
		d:     d,
		state: prometheus.NewDesc("weft_peer_paths", "Peer subnets by the state their probes found (unknown, up, degraded, down).", []string{"state"}, nil),
		sent:  prometheus.NewDesc("weft_probe_packets_sent_total", "Probe packets sent to the peers.", nil, nil),
		unsent: prometheus.NewDesc("weft_probe_rounds_unsent_total",
			"Rounds of probes the kernel had no room for (ENOBUFS: probes to peers that do not answer ARP fill the socket): not judged, sent again a period later.", nil, nil),
	}
}

func (c *pathsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.state
	ch <- c.sent
	ch <- c.unsent
}

func (c *pathsCollector) Collect(ch chan<- prometheus.Metric) {
	pr := c.d.prober.Load()
	if pr == nil {
		return
	}
	for state, n := range pr.Counts() {
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, float64(n), state)
	}
	ch <- prometheus.MustNewConstMetric(c.sent, prometheus.CounterValue, float64(pr.Sent()))
	ch <- prometheus.MustNewConstMetric(c.unsent, prometheus.CounterValue, float64(pr.Unsent()))
}
