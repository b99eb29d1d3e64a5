package daemon

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/factory"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/lease/etcd"
)

// metricsHandler serves GET /metrics from a registry of this daemon's own: the Go
// runtime and process collectors and weftCollector, which reads the counters the data
// path, the backend and the lease manager keep anyway, at scrape time.
func (d *daemon) metricsHandler() http.Handler {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(d.metricsCollectors()...)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      zap.NewStdLog(d.log),
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// metricsCollectors are what GET /metrics serves (TestMetricsDocumented reads them).
func (d *daemon) metricsCollectors() []prometheus.Collector {
	cs := []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newWeftCollector(d),
		newPathsCollector(d),
	}
	if d.probeRTT != nil {
		cs = append(cs, d.probeRTT)
	}
	return cs
}

// weftCollector turns weftd's counters into metrics when scraped, with the metrics
// of the backend's own (encap.Report.Metrics, described by encap/factory); nothing is
// counted twice and the hot path does not know it exists.
type weftCollector struct {
	d *daemon

	buildInfo, ready                                  *prometheus.Desc
	leaseExpiry, renewals, renewFailures              *prometheus.Desc
	resyncs, watchErrors, etcdReachable, nodeLists    *prometheus.Desc
	reconcileRepairs, firewallRepairs, peers, subnetD *prometheus.Desc
	firewallInfo                                      *prometheus.Desc
}

func newWeftCollector(d *daemon) *weftCollector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("weft_"+name, help, labels, nil)
	}
	return &weftCollector{
		d:                d,
		buildInfo:        desc("build_info", "Always 1; the labels say which weftd this is.", "version", "revision", "goversion"),
		ready:            desc("ready", "1 when /readyz answers 200: lease held, data path running, watch current.", "reason"),
		leaseExpiry:      desc("lease_expiry_timestamp_seconds", "When our subnet lease runs out unless renewed (Unix time)."),
		renewals:         desc("lease_renewals_total", "Successful renewals of our subnet lease."),
		renewFailures:    desc("lease_renewal_failures_total", "Renewals of our subnet lease that failed and were retried."),
		resyncs:          desc("lease_watch_resyncs_total", "Re-lists of the other hosts' leases after a watch was interrupted (compaction, outage)."),
		watchErrors:      desc("lease_watch_errors_total", "Lists and watches of the other hosts' leases that failed or were interrupted."),
		etcdReachable:    desc("etcd_reachable", "1 while weftd's connection to etcd is up, 0 while it is down."),
		nodeLists:        desc("kube_node_lists_total", "Full lists of the Nodes (a list, or a watch that starts with every Node), the first one included; those after it count in weft_lease_watch_resyncs_total too."),
		reconcileRepairs: desc("reconcile_repairs_total", "Kernel entries the "+orList(factory.Repairers)+" repair loop found removed or changed and wrote again, by object (device, route, neigh, fdb).", "backend", "object"),
		firewallRepairs:  desc("firewall_repairs_total", "Times weftd found its firewall rules (forward and masquerade) removed or changed and wrote them again, by kind (iptables, nftables).", "firewall"),
		firewallInfo:     desc("firewall_info", "Always 1 once the firewall rules are set up; backend says what writes them: iptables-legacy, iptables-nft, iptables (plain, --iptables-mode=plain) or nftables (EnableNFTables).", "backend"),
		peers:            desc("peers", "Other hosts' subnets the backend carries traffic to."),
		subnetD:          desc("lease_info", "Always 1 while a lease is held; the labels name it (a family the network lacks: empty).", "subnet", "ipv6_subnet", "backend"),
	}
}

func (c *weftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.buildInfo, c.ready,
		c.leaseExpiry, c.renewals, c.renewFailures, c.resyncs, c.watchErrors, c.etcdReachable, c.nodeLists,
		c.reconcileRepairs, c.firewallRepairs, c.firewallInfo, c.peers, c.subnetD} {
		ch <- d
	}
	factory.DescribeMetrics(ch)
}

func (c *weftCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	bi := c.d.cfg.Build
	gauge(c.buildInfo, 1, bi.Version, bi.Revision, bi.GoVersion)

	reason := ""
	if err := c.d.notReady(time.Now()); err != nil {
		reason = readyReason(err)
	}
	gauge(c.ready, b2f(reason == ""), reason)

	c.collectFirewall(counter, gauge)
	if p := c.d.mgr.Load(); p != nil {
		if s, ok := (*p).(lease.StatsReporter); ok {
			c.collectLease(s.Stats(), counter, gauge)
		}
	}
	bp := c.d.be.Load()
	if bp == nil {
		return
	}
	be := *bp
	if h := c.d.held.Load(); h != nil {
		gauge(c.subnetD, 1, prefixLabel(h.Subnet), prefixLabel(h.IPv6Subnet), be.Type())
	}
	rp, ok := be.(encap.Reporter)
	if !ok {
		return
	}
	rep := rp.Report()
	gauge(c.peers, float64(rep.Peers))
	if rk, ok := be.(encap.RepairKindLister); ok && rep.Repairs != nil {
		for _, object := range rk.RepairKinds() {
			counter(c.reconcileRepairs, rep.Repairs[object], be.Type(), object)
		}
	}
	if rep.Metrics != nil {
		rep.Metrics.Collect(ch)
	}
}

// collectLease reports the lease manager's counters: those its source keeps.
func (c *weftCollector) collectLease(st lease.Stats, counter func(*prometheus.Desc, uint64, ...string), gauge func(*prometheus.Desc, float64, ...string)) {
	counter(c.resyncs, st.Resyncs)
	counter(c.watchErrors, st.WatchErrors)
	switch st.Source {
	case lease.SourceEtcd:
		if !st.Expiration.IsZero() {
			gauge(c.leaseExpiry, float64(st.Expiration.UnixNano())/1e9)
		}
		counter(c.renewals, st.Renewals)
		counter(c.renewFailures, st.RenewFailures)
		gauge(c.etcdReachable, b2f(st.EtcdReachable))
	case lease.SourceKube:
		counter(c.nodeLists, st.NodeLists)
	}
}

// collectFirewall reports the backend and the firewall repairs of the rule sets this
// run keeps.
func (c *weftCollector) collectFirewall(counter func(*prometheus.Desc, uint64, ...string), gauge func(*prometheus.Desc, float64, ...string)) {
	if fw := c.d.fw; fw != nil {
		counter(c.firewallRepairs, c.d.fwRepairs.Load(), fw.Name())
		gauge(c.firewallInfo, 1, fw.Backend())
	}
}

// readyReason is a short, bounded label value for why weftd is not ready.
func readyReason(err error) string {
	switch {
	case errors.Is(err, errNoLeaseSrc):
		return "no_lease_source"
	case errors.Is(err, errNoLease):
		return "no_lease"
	case errors.Is(err, errNoDataPath):
		return "no_data_path"
	case errors.Is(err, etcd.ErrUnreachable):
		return "etcd_unreachable"
	}
	return "other"
}

// orList joins words as a list in prose: "a", "a or b", "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// prefixLabel is p as a label value: empty when p is absent.
func prefixLabel(p netip.Prefix) string {
	if !p.IsValid() {
		return ""
	}
	return p.String()
}
