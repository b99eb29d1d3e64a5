package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

func fmtF(v float64, prec int) string { return fmt.Sprintf("%.*f", prec, v) }

func (p ScalePoint) cells(rate int) []string {
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
	ready := fmtF(p.ReadyS, 2)
	if !p.PeersSeen {
		ready += "*"
	}
	resync := func(v float64) string { return dash(v >= 0, fmtF(v, 0)) }
	return []string{
		name, fmt.Sprint(p.Hosts), ready, fmtF(p.RSSMiB, 1), fmtF(p.IdleCPUPct, 2),
		dash(lat, fmtF(p.P50Ms, 1)), dash(lat, fmtF(p.P99Ms, 1)), dash(lat, fmt.Sprint(p.Missed)),
		fmtF(p.ChurnRate, 1), fmtF(p.ChurnCPUPct, 1),
		dash(lat || p.StaleAfterChurn+p.MissingAfterChurn > 0, fmt.Sprintf("%d/%d", p.StaleAfterChurn, p.MissingAfterChurn)),
		resync(p.ResyncsChurn),
		resync(p.ResyncsRestart),
		fmtF(p.RestartCPUPct, 2), dash(p.SettleS >= 0, fmtF(p.SettleS, 0)),
		dash(lat || p.StaleAfterRestart+p.MissingAfterRestart > 0, fmt.Sprintf("%d/%d", p.StaleAfterRestart, p.MissingAfterRestart)),
		resync(p.ResyncsOvertake), dash(p.OvertakeCatchUpS >= 0, fmtF(p.OvertakeCatchUpS, 2)),
		fmtF(p.OvertakeCPUPct, 2), dash(p.OvertakeSettleS >= 0, fmtF(p.OvertakeSettleS, 0)),
		dash(p.OvertakeChanges > 0, fmt.Sprintf("%d/%d", p.StaleAfterOvertake, p.MissingAfterOvertake)),
	}
}

var scaleHead = []string{"daemon", "hosts", "ready s", "RSS MiB", "idle CPU %",
	"update p50 ms", "update p99 ms", "missed", "changes/s done", "churn CPU %", "stale/missing after churn",
	"re-lists (compaction)",
	"re-lists (etcd restart)", "CPU % after restart", "idle again s", "stale/missing after restart",
	"re-lists (overtaken watch)", "caught up s", "CPU % after overtaking", "idle again s (overtaken)", "stale/missing after overtaking"}

// WriteTable writes the points as an aligned text table.
func (r *ScaleReport) WriteTable(w io.Writer) error {
	rows := [][]string{r.head()}
	for _, p := range r.Points {
		rows = append(rows, r.row(p))
	}
	width := columnWidths(rows)
	var b strings.Builder
	for _, c := range rows {
		writeAligned(&b, c, width)
	}
	for _, p := range r.Points {
		for _, e := range p.Errors {
			fmt.Fprintf(&b, "%s at %d: %s\n", p.Subject, p.Hosts, firstLine(e))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// probeCol is the column of the probe packets, in a report where a daemon probed.
const probeCol = 5

// probed reports whether a point has probe packets (the table then has their column;
// reports of runs before weftd probed stay as they were).
func (r *ScaleReport) probed() bool {
	for _, p := range r.Points {
		if p.ProbePktsPerS > 0 {
			return true
		}
	}
	return false
}

// head is the table's header of the report's mode.
func (r *ScaleReport) head() []string {
	if r.Mode == "kube" {
		return kubeHead
	}
	h := scaleHead
	if r.probed() {
		h = slices.Insert(slices.Clone(h), probeCol, "probe pkts/s")
	}
	if r.Sites {
		h = append(slices.Clone(h), "first ways left", "left unprobed", "all left s", fmt.Sprintf("CPU %% after the ways (≥ %g s after ready)", r.SettledS))
	}
	return h
}

// row is p's cells in the report's mode.
func (r *ScaleReport) row(p ScalePoint) []string {
	if r.Mode == "kube" {
		return p.kubeCells()
	}
	c := p.cells(r.Rate)
	if r.probed() {
		c = slices.Insert(c, probeCol, fmtF(p.ProbePktsPerS, 1))
	}
	if r.Sites {
		unprobed := "—"
		if p.Unprobed != nil {
			unprobed = fmt.Sprint(*p.Unprobed)
		}
		left, took := "—", "—"
		if p.WaysLeft > 0 || p.Unprobed != nil {
			left, took = fmt.Sprint(p.WaysLeft), fmtF(p.WaysS, 1)
		}
		c = append(c, left, unprobed, took, fmtF(p.WaysCPUPct, 2))
	}
	return c
}

// absPath is an absolute path in free text: a slash at the start or after a space,
// quote, bracket or '=', then a letter, '.' or '_' (so neither the // of a URL nor a
// prefix length such as /29), up to the next separator.
var absPath = regexp.MustCompile(`(^|[\s"'(\[=])(/[A-Za-z_.][^\s"'():,;\]]*)`)

// portablePath names a file of the machine that ran the benchmark by its base name:
// a report committed to the repository or shared must not hold the run's directories
// (/work/..., /tmp/..., a home). The kernel's own files (/proc, /sys, /dev) are the same
// on every machine and stay whole.
func portablePath(p string) string {
	for _, keep := range []string{"/proc/", "/sys/", "/dev/"} {
		if strings.HasPrefix(p, keep) {
			return p
		}
	}
	return filepath.Base(p)
}

// portable is the report as the files hold it: each daemon binary by its base name
// (bin/flanneld and /work/x/bin/weftd become flanneld and weftd), and absolute paths in
// error text reduced to base names. The terminal table (WriteTable) keeps them whole.
func (r *ScaleReport) portable() *ScaleReport {
	c := *r
	c.Points = make([]ScalePoint, len(r.Points))
	for i, p := range r.Points {
		if p.Binary != "" {
			p.Binary = filepath.Base(p.Binary)
		}
		if len(p.Errors) > 0 {
			errs := make([]string, len(p.Errors))
			for j, e := range p.Errors {
				errs[j] = absPath.ReplaceAllStringFunc(e, func(m string) string {
					sm := absPath.FindStringSubmatch(m)
					return sm[1] + portablePath(sm[2])
				})
			}
			p.Errors = errs
		}
		c.Points[i] = p
	}
	return &c
}

// WriteMarkdown writes the report as Markdown: the setup, the table, the errors. Paths
// of the machine that ran it are reduced to base names (see portable).
func (r *ScaleReport) WriteMarkdown(w io.Writer) error {
	r = r.portable()
	var b strings.Builder
	if r.Mode == "kube" {
		b.WriteString("# weft in Kubernetes mode at scale\n\n")
		r.kubeIntro(&b)
	} else {
		b.WriteString("# weft control plane at scale\n\n")
		r.etcdIntro(&b)
	}
	md := func(c []string) { b.WriteString("| " + strings.Join(c, " | ") + " |\n") }
	head := r.head()
	md(head)
	sep := make([]string, len(head))
	for i := range sep {
		sep[i] = "---:"
	}
	sep[0] = "---"
	md(sep)
	for _, p := range r.Points {
		md(r.row(p))
	}
	if r.Mode == "kube" {
		r.requestLines(&b)
	}
	var eb strings.Builder
	for _, p := range r.Points {
		for _, e := range p.Errors {
			fmt.Fprintf(&eb, "%s at %d: %s\n", p.Subject, p.Hosts, firstLine(e))
		}
	}
	if eb.Len() > 0 {
		b.WriteString("\n## Errors\n\n```\n" + eb.String() + "```\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// etcdIntro is the Markdown report's setup paragraph of an etcd run.
func (r *ScaleReport) etcdIntro(b *strings.Builder) {
	sent := "nothing is ever sent to them"
	if r.probed() {
		sent = "nothing answers there: weftd's peer probes go unanswered, every simulated host is down to them"
	}
	fmt.Fprintf(b, "Run %s, kernel %s, %d CPUs. Backend `%s`, Network %s with /%d subnets. "+
		"Simulated hosts are leases written straight into a real etcd (flannel's layout, v3, one etcd lease of 24 h); "+
		"their PublicIPs repeat over 192.0.2.100-254 (the lab's LAN, on-link for host-gw; %s). "+
		"Each daemon runs alone on a fresh lab host, with the same leases. ",
		r.Started.UTC().Format(time.RFC3339), r.Kernel, r.CPUs, r.Backend, r.Network, r.SubnetLen, sent)
	fmt.Fprintf(b, "Ready: daemon start to subnet.env written and every simulated host's route in the kernel "+
		"(for udp/alloc, weftd's `weft_peers`; * marks a daemon whose peers cannot be seen: subnet.env only). "+
		"Idle CPU over %gs. Churn: %d lease changes per second asked for %gs (a delete and an add in turn; "+
		"\"changes/s done\" is the rate the benchmark's writes to etcd reached), "+
		"latency from just before the etcd write to the route's netlink event; one physical compaction half way "+
		"(it does not overtake the watch). Then etcd is stopped and started; CPU over the next %gs. "+
		"Last, a compaction that overtakes the daemon's watch: the daemon is stopped (SIGSTOP), %d lease changes are written, "+
		"etcd is compacted after them, the daemon's TCP connections to etcd are destroyed (`ss -K`; etcd's answers were dropped "+
		"on the way in meanwhile, so nothing queued for it survives) and it continues (SIGCONT); "+
		"its watch must resume from a compacted revision and re-list (one re-list is right; weftd's are counted), "+
		"caught up: SIGCONT to the kernel's routes equal to etcd (— if not within 30 s); CPU over the next %gs. "+
		"Stale/missing compare the kernel routes with etcd.",
		r.IdleS, r.Rate, r.ChurnS, r.IdleS, r.Rate, r.IdleS)
	if r.probed() {
		b.WriteString(" Probe pkts/s: weftd's weft_probe_packets_sent_total over the idle window (0.0: not probing).")
	}
	if r.Sites {
		b.WriteString(" Sites: weftd runs with `--site`, every simulated host is in another site with a WireGuard key of its own, " +
			"so weftd chooses each one's way on evidence; none answers, so each leaves its first way when its time is up. " +
			"First ways left: weftd's weft_path_changes_total when it reached the number of simulated hosts, " +
			"\"all left s\" after ready; left unprobed: weft_path_left_unprobed_total then, the ways left before a round of " +
			"probes on them was judged (the goal is 0). A weftd that does not probe (WEFT_PROBE=false) chooses no way: every peer stays direct. " +
			fmt.Sprintf("Then every daemon's CPU over the idle window once every first way was left, and at least %g s after ready.", r.SettledS))
	}
	b.WriteString("\n\n")
}

// WriteJSON writes the report as indented JSON, with paths of the machine that ran it
// reduced to base names (see portable).
func (r *ScaleReport) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r.portable())
}

var scaleColors = []string{"#1f77b4", "#e07b39", "#2ca02c", "#9467bd"}

// Sizes of the SVG: its width, a panel's, its top and left margins.
const (
	svgWidth, svgPanelW, svgPanelH = 960, 280, 220
	svgLeft, svgTop                = 50, 60
)

// svgPanel is one panel of the SVG: its title and the figure it plots (and whether
// a point has it).
type svgPanel struct {
	title string
	get   func(ScalePoint) (float64, bool)
}

// WriteSVG draws three panels against the number of hosts: ready time, RSS and p99
// update time, one line per daemon.
func (r *ScaleReport) WriteSVG(w io.Writer) error {
	var subjects []string
	maxHosts := 0
	for _, p := range r.Points {
		if !slices.Contains(subjects, p.Subject) {
			subjects = append(subjects, p.Subject)
		}
		maxHosts = max(maxHosts, p.Hosts)
	}
	panels := []svgPanel{
		{"ready (s)", func(p ScalePoint) (float64, bool) { return p.ReadyS, len(p.Errors) == 0 || p.ReadyS > 0 }},
		{"RSS (MiB)", func(p ScalePoint) (float64, bool) { return p.RSSMiB, p.RSSMiB > 0 }},
		{"update p99 (ms)", func(p ScalePoint) (float64, bool) { return p.P99Ms, p.P99Ms > 0 }},
	}
	height := svgTop + svgPanelH + 90
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgWidth, height)
	title := fmt.Sprintf("weft control plane: %s backend, %d changes/s churn", r.Backend, r.Rate)
	if r.Mode == "kube" {
		title = fmt.Sprintf("weft in Kubernetes mode: Nodes, %s backend, %d Node changes/s churn", r.Backend, r.Rate)
	}
	fmt.Fprintf(&b, `<text x="10" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", esc(title))
	for i, pn := range panels {
		r.writePanel(&b, float64(svgLeft+i*(svgPanelW+40)), pn, subjects, maxHosts)
	}
	for si, s := range subjects {
		x := 10 + si*160
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			x, svgTop+svgPanelH+40, scaleColors[si%len(scaleColors)], x+16, svgTop+svgPanelH+51, esc(s))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writePanel draws panel pn at x0: its axes, the hosts ticks and one line per
// subject.
func (r *ScaleReport) writePanel(b *strings.Builder, x0 float64, pn svgPanel, subjects []string, maxHosts int) {
	const panelW, panelH = svgPanelW, svgPanelH
	y0 := float64(svgTop)
	maxV := 0.0
	for _, p := range r.Points {
		if v, ok := pn.get(p); ok {
			maxV = max(maxV, v)
		}
	}
	if maxV == 0 {
		maxV = 1
	}
	maxV *= 1.1
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", x0, y0-10, esc(pn.title))
	fmt.Fprintf(b, `<path d="M%.0f %.0f V%.0f H%.0f" stroke="black" fill="none"/>`+"\n", x0, y0, y0+panelH, x0+panelW)
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="end">%s</text>`+"\n", x0-4, y0+8, esc(fmtF(maxV, 1)))
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="end">0</text>`+"\n", x0-4, y0+panelH)
	var ticks []int
	for _, p := range r.Points {
		if !slices.Contains(ticks, p.Hosts) && maxHosts > 0 {
			ticks = append(ticks, p.Hosts)
			px := x0 + float64(p.Hosts)/float64(maxHosts)*panelW
			fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle" font-size="10">%d</text>`+"\n", px, y0+panelH+14, p.Hosts)
		}
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="end">hosts</text>`+"\n", x0+panelW, y0+panelH+28)
	for si, s := range subjects {
		var pts []string
		for _, p := range r.Points {
			v, ok := pn.get(p)
			if p.Subject != s || !ok || maxHosts == 0 {
				continue
			}
			px := x0 + float64(p.Hosts)/float64(maxHosts)*panelW
			py := y0 + panelH - v/maxV*panelH
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, py))
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px, py, scaleColors[si%len(scaleColors)])
		}
		if len(pts) > 1 {
			fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n",
				strings.Join(pts, " "), scaleColors[si%len(scaleColors)])
		}
	}
}

// WriteFiles writes scale.md, scale.json and scale.svg into dir.
func (r *ScaleReport) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report dir: %w", err)
	}
	for name, f := range map[string]func(io.Writer) error{
		"scale.md": r.WriteMarkdown, "scale.json": r.WriteJSON, "scale.svg": r.WriteSVG,
	} {
		out, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		err = f(out)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("report %s: %w", name, err)
		}
	}
	return nil
}
