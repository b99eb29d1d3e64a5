package bench

import (
	"fmt"
	"sort"
	"strings"
)

var kubeHead = []string{"daemon", "Nodes", "ready s", "load", "RSS MiB at ready", "RSS MiB at rest", "heap MiB at rest",
	"CPU s to ready", "CPU s in all", "update p50 ms", "update p99 ms", "missed", "changes/s done", "churn CPU %",
	"stale/missing after churn", "lists/min", "watches/min", "gets/min", "writes/min"}

// requestsPerMin sums the requests whose verb is one of verbs, per minute of the run.
func (p ScalePoint) requestsPerMin(verbs ...string) (float64, bool) {
	if p.Requests == nil || p.RunS <= 0 {
		return 0, false
	}
	n := 0
	for k, v := range p.Requests {
		verb, _, _ := strings.Cut(k, " ")
		for _, w := range verbs {
			if verb == w {
				n += v
			}
		}
	}
	return float64(n) / (p.RunS / 60), true
}

func (p ScalePoint) kubeCells() []string {
	dash := func(ok bool, s string) string {
		if !ok {
			return "—"
		}
		return s
	}
	lat := p.ChurnOps > 0 && p.P99Ms > 0
	name := p.Subject
	if len(p.Errors) > 0 {
		name += " (failed)"
	}
	rpm := func(verbs ...string) string {
		v, ok := p.requestsPerMin(verbs...)
		return dash(ok, fmtF(v, 1))
	}
	return []string{
		name, fmt.Sprint(p.Hosts), fmtF(p.ReadyS, 2), fmtF(p.Load1, 1), fmtF(p.RSSMiB, 1), dash(p.RSSRestMiB > 0, fmtF(p.RSSRestMiB, 1)),
		dash(p.HeapRestMiB > 0, fmtF(p.HeapRestMiB, 1)), fmtF(p.CPUReadyS, 2), fmtF(p.CPUS, 2),
		dash(lat, fmtF(p.P50Ms, 1)), dash(lat, fmtF(p.P99Ms, 1)), dash(lat, fmt.Sprint(p.Missed)),
		dash(p.ChurnOps > 0, fmtF(p.ChurnRate, 1)), dash(p.ChurnOps > 0, fmtF(p.ChurnCPUPct, 1)),
		dash(p.ChurnOps > 0, fmt.Sprintf("%d/%d", p.StaleAfterChurn, p.MissingAfterChurn)),
		rpm("list"), rpm("watch"), rpm("get"), rpm("patch", "update", "create"),
	}
}

// kubeIntro is the Markdown report's setup paragraph in Kubernetes mode.
func (r *ScaleReport) kubeIntro(b *strings.Builder) {
	fmt.Fprintf(b, "Run %s, kernel %s, %d CPUs. Kubernetes mode (`--kube-subnet-mgr`), backend `vxlan`, Network %s with /%d podCIDRs. "+
		"A real kube-apiserver (on the lab's router, with its etcd) holds N peer Nodes as kubelets and flannel leave them "+
		"(labels, flannel's vxlan annotations, a podCIDR, a status of about 10 KB with conditions and 40 images); "+
		"their public IPs repeat over 192.0.2.100-254 (nothing is ever sent to them). Each daemon runs alone on a fresh lab host "+
		"with a Node and pod of its own and kube-flannel's ServiceAccount and RBAC (deploy/rbac.yml, never admin), with the same Nodes. ",
		r.Started.UTC().Format("2006-01-02T15:04:05Z"), r.Kernel, r.CPUs, r.Network, r.SubnetLen)
	fmt.Fprintf(b, "Ready: daemon start to every peer's route in its namespace; load: the 1-minute load average then "+
		"(the machine was shared: times move with it, RSS much less). RSS at rest, and weftd's heap in use, after %gs idle. "+
		"CPU s: the daemon's CPU time to ready and over its whole run. ", r.IdleS)
	if r.ChurnS > 0 {
		fmt.Fprintf(b, "Churn: %d Node changes per second asked for %gs, a peer Node deleted and a new one created "+
			"(with its annotations and podCIDR, then its status) in turn; latency from just before the API server write "+
			"to the route's netlink event in the daemon's namespace (missed: none within 10 s); stale/missing compare the routes with the Nodes after it. ",
			r.Rate, r.ChurnS)
	}
	b.WriteString("Requests per minute of the daemon's run (start to stop), counted once each in the API server's audit log " +
		"of kube-flannel's ServiceAccount: lists, watches, gets, and writes (patch, update, create).\n\n")
}

// requestLines lists each point's requests by verb and resource.
func (r *ScaleReport) requestLines(b *strings.Builder) {
	b.WriteString("\n## Requests to the API server\n\n")
	for _, p := range r.Points {
		keys := make([]string, 0, len(p.Requests))
		for k := range p.Requests {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, p.Requests[k]))
		}
		fmt.Fprintf(b, "- %s at %d Nodes, %.0f s run: %s\n", p.Subject, p.Hosts, p.RunS, strings.Join(parts, ", "))
	}
}
