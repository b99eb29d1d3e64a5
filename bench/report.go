package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Metric keys of Figures.
const (
	TCPGbps    = "tcp_gbps"
	UDPKpps    = "udp64_kpps"
	UDPLossPct = "udp64_loss_pct"
	RTTMedian  = "rtt_median_us"
	RTTP99     = "rtt_p99_us"
	CPUPerGBs  = "cpu_s_per_gb"
	// TCP4Gbps is four parallel streams (iperf3 -P 4).
	TCP4Gbps = "tcp4_gbps"
	// TotalCPUPerGB is the whole machine's busy CPU (user, system, irq, softirq
	// from /proc/stat) per GB of the one-stream TCP run.
	TotalCPUPerGB = "total_cpu_s_per_gb"
	// IdleCPUPct is a daemon's CPU over the run's idle window (every subject up, no
	// traffic) as a percentage of one core: the busier of the subject's daemons.
	// It is measured once per run, not per repetition (Row.IdleCPUPct).
	IdleCPUPct = "idle_cpu_pct"
)

// MetricInfo describes one figure.
type MetricInfo struct {
	Key, Title, Unit string
	HigherIsBetter   bool
}

// Metrics lists the figures in report order.
var Metrics = []MetricInfo{
	{TCPGbps, "TCP", "Gbit/s", true},
	{TCP4Gbps, "TCP -P 4", "Gbit/s", true},
	{UDPKpps, "UDP 64 B", "kpps", true},
	{UDPLossPct, "UDP loss", "%", false},
	{RTTMedian, "RTT median", "µs", false},
	{RTTP99, "RTT p99", "µs", false},
	{CPUPerGBs, "daemon CPU", "s/GB", false},
	{TotalCPUPerGB, "total CPU", "s/GB", false},
	{IdleCPUPct, "idle CPU", "% core", false},
}

// Figures maps metric keys to values; a metric not measured is absent.
type Figures map[string]float64

// Row is one subject's results.
type Row struct {
	Subject       string    `json:"subject"`
	Kind          string    `json:"kind"`
	Reps          []Figures `json:"reps"`
	Median        Figures   `json:"median"`
	VsKernelVXLAN Figures   `json:"vs_kernel_vxlan,omitempty"`
	VsUnderlay    Figures   `json:"vs_underlay,omitempty"`
	Errors        []string  `json:"errors,omitempty"`
	// NotApplicable says why the subject cannot carry the report's family (no figures).
	NotApplicable string `json:"not_applicable,omitempty"`
	// IdleCPUPct is the busier daemon's CPU over the idle window, % of a core (nil
	// for rows without daemons or runs without the window).
	IdleCPUPct *float64 `json:"idle_cpu_pct,omitempty"`
}

// Report is a matrix run's result.
type Report struct {
	Started   time.Time `json:"started"`
	Reps      int       `json:"reps"`
	Family    int       `json:"family"` // 4 or 6 (0 in reports from before: 4)
	DurationS float64   `json:"duration_s"`
	Kernel    string    `json:"kernel,omitempty"`
	CPUs      int       `json:"cpus,omitempty"`
	// CPUModel is /proc/cpuinfo's model name; LoadAvg the 1, 5 and 15 minute load
	// averages when the run started.
	CPUModel string `json:"cpu_model,omitempty"`
	LoadAvg  string `json:"load_avg,omitempty"`
	// Commit is `git describe --always --dirty` of the tree the run started in;
	// Weftd is the measured weftd's --version.
	Commit string `json:"commit,omitempty"`
	Weftd  string `json:"weftd,omitempty"`
	// IdleS is the idle window: seconds with every subject up and no traffic, over
	// which IdleCPUPct was measured (0: not measured).
	IdleS float64 `json:"idle_s,omitempty"`
	Rows  []Row   `json:"rows"`
}

// Row returns the row of subject, or nil.
func (r *Report) Row(subject string) *Row {
	for i := range r.Rows {
		if r.Rows[i].Subject == subject {
			return &r.Rows[i]
		}
	}
	return nil
}

// Finish computes every row's medians over its repetitions and the ratios to
// kernel-vxlan and underlay rows of the same report.
func (r *Report) Finish() {
	for i := range r.Rows {
		row := &r.Rows[i]
		row.Median = Figures{}
		for _, m := range Metrics {
			var v []float64
			for _, f := range row.Reps {
				if x, ok := f[m.Key]; ok {
					v = append(v, x)
				}
			}
			if len(v) > 0 {
				row.Median[m.Key] = Median(v)
			}
		}
		if row.IdleCPUPct != nil {
			row.Median[IdleCPUPct] = *row.IdleCPUPct
		}
	}
	vx, ul := r.Row(KernelVXLAN), r.Row(Underlay)
	for i := range r.Rows {
		row := &r.Rows[i]
		row.VsKernelVXLAN, row.VsUnderlay = nil, nil
		if vx != nil {
			row.VsKernelVXLAN = ratios(row.Median, vx.Median)
		}
		if ul != nil {
			row.VsUnderlay = ratios(row.Median, ul.Median)
		}
	}
}

func ratios(f, ref Figures) Figures {
	out := Figures{}
	for k, v := range f {
		if d, ok := ref[k]; ok && d != 0 {
			out[k] = v / d
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

func fmtValue(key string, f Figures) string {
	v, ok := f[key]
	if !ok {
		return "—"
	}
	switch {
	case key == UDPLossPct:
		return fmt.Sprintf("%.1f", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func fmtRatio(key string, f Figures) string {
	v, ok := f[key]
	if !ok || math.IsInf(v, 0) || math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.2fx", v)
}

// cells returns the table's header and rows: each figure with its ratio to
// kernel-vxlan (and the throughputs also to the underlay).
func (r *Report) cells() ([]string, [][]string) {
	head := []string{"subject"}
	for _, m := range Metrics {
		head = append(head, m.Title+" "+m.Unit)
		if hasKVXLANColumn(m.Key) {
			head = append(head, "vs kvxlan")
		}
		if m.Key == TCPGbps || m.Key == UDPKpps {
			head = append(head, "vs underlay")
		}
	}
	var rows [][]string
	for _, row := range r.Rows {
		c := []string{row.Subject}
		for _, m := range Metrics {
			c = append(c, fmtValue(m.Key, row.Median))
			if hasKVXLANColumn(m.Key) {
				c = append(c, fmtRatio(m.Key, row.VsKernelVXLAN))
			}
			if m.Key == TCPGbps || m.Key == UDPKpps {
				c = append(c, fmtRatio(m.Key, row.VsUnderlay))
			}
		}
		if len(row.Errors) > 0 && len(row.Median) == 0 {
			c[0] += " (failed)"
		}
		if row.NotApplicable != "" {
			c[0] += " (n/a)"
		}
		rows = append(rows, c)
	}
	return head, rows
}

// hasKVXLANColumn reports whether the table gives metric key's ratio to
// kernel-vxlan in a column of its own.
func hasKVXLANColumn(key string) bool {
	switch key {
	case TCPGbps, TCP4Gbps, UDPKpps, RTTMedian, TotalCPUPerGB:
		return true
	}
	return false
}

// WriteTable writes the medians as an aligned text table for the terminal.
func (r *Report) WriteTable(w io.Writer) error {
	head, rows := r.cells()
	width := columnWidths(append([][]string{head}, rows...))
	var b strings.Builder
	if t := r.familyTitle(); t != "" {
		b.WriteString(strings.TrimPrefix(t, ": ") + "\n")
	}
	line := func(c []string) { writeAligned(&b, c, width) }
	line(head)
	total := len(head)*2 - 2
	for _, n := range width {
		total += n
	}
	b.WriteString(strings.Repeat("-", total) + "\n")
	for _, c := range rows {
		line(c)
	}
	r.writeErrors(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) writeErrors(b *strings.Builder) {
	for _, row := range r.Rows {
		if row.NotApplicable != "" {
			fmt.Fprintf(b, "%s: n/a: %s\n", row.Subject, row.NotApplicable)
		}
		for _, e := range row.Errors {
			fmt.Fprintf(b, "%s: %s\n", row.Subject, firstLine(e))
		}
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// WriteMarkdown writes the report as Markdown: how it was measured, the medians
// with ratios, the ratios of every figure, and the errors.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("# weft benchmark" + r.familyTitle() + "\n\n")
	fmt.Fprintf(&b, "Run %s: %d repetition(s) of %gs per workload, subjects alternated across repetitions, medians shown.",
		r.Started.UTC().Format(time.RFC3339), r.Reps, r.DurationS)
	if m := r.Machine(); m != "" {
		fmt.Fprintf(&b, " Run record: %s.", m)
	}
	b.WriteString(" Ratios are to kernel-vxlan (vs kvxlan) and to the bare underlay measured in the same run." +
		" TCP: one iperf3 stream pod to pod; TCP -P 4: four streams; UDP: iperf3 with 64-byte payloads at full rate, delivered packets;" +
		" RTT: ping every 10 ms; daemon CPU: user+system seconds of both hosts' daemons per GB moved by one-stream TCP;" +
		" total CPU: the whole machine's user+system+irq+softirq seconds (/proc/stat) per GB of the same run," +
		" iperf3 and the kernel's packet processing included (and anything else running on the machine);" +
		" idle CPU: the busier of a subject's daemons over the idle window (every subject up, no traffic), % of one core.\n\n")
	head, rows := r.cells()
	mdRow := func(c []string) { b.WriteString("| " + strings.Join(c, " | ") + " |\n") }
	mdRow(head)
	sep := make([]string, len(head))
	for i := range sep {
		sep[i] = "---:"
	}
	sep[0] = "---"
	mdRow(sep)
	for _, c := range rows {
		mdRow(c)
	}
	b.WriteString("\n## Every figure as a ratio\n\n")
	h := []string{"subject", "reference"}
	for _, m := range Metrics {
		h = append(h, m.Title)
	}
	mdRow(h)
	mdRow(append([]string{"---", "---"}, sep[1:len(Metrics)+1]...))
	for _, row := range r.Rows {
		for _, ref := range []struct {
			name string
			f    Figures
		}{{KernelVXLAN, row.VsKernelVXLAN}, {Underlay, row.VsUnderlay}} {
			c := []string{row.Subject, ref.name}
			for _, m := range Metrics {
				c = append(c, fmtRatio(m.Key, ref.f))
			}
			mdRow(c)
		}
	}
	if r.HasGoalRows() {
		r.writeGoalsMarkdown(&b)
	}
	var eb strings.Builder
	r.writeErrors(&eb)
	if eb.Len() > 0 {
		b.WriteString("\n## Errors\n\n```\n" + eb.String() + "```\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// columnWidths is the widest cell of each column of rows, in runes.
func columnWidths(rows [][]string) []int {
	var width []int
	for _, c := range rows {
		for i, s := range c {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len([]rune(s)))
		}
	}
	return width
}

// writeAligned writes one row of a text table: the first column left-aligned, the
// others right-aligned, two spaces apart.
func writeAligned(b *strings.Builder, row []string, width []int) {
	for i, s := range row {
		pad := strings.Repeat(" ", width[i]-len([]rune(s)))
		if i == 0 {
			b.WriteString(s + pad)
		} else {
			b.WriteString("  " + pad + s)
		}
	}
	b.WriteString("\n")
}

// familyShort is "" for IPv4 reports, " (IPv6)" otherwise.
func (r *Report) familyShort() string {
	if r.Family != 6 {
		return ""
	}
	return " (IPv6)"
}

// familyTitle is "" for IPv4 reports and says how the IPv6 rows were made otherwise.
func (r *Report) familyTitle() string {
	if r.Family != 6 {
		return ""
	}
	return ": IPv6 (pods on an IPv6-only network, IPv6 underlay; the kernel references in their IPv6 forms)"
}
