package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/bench/lab"
)

// Options configure a matrix run.
type Options struct {
	Subjects []Subject
	Reps     int           // default 3
	Duration time.Duration // per iperf3 workload; default 5 s
	Pings    int           // default 200, every 10 ms
	// Family is the IP version of the traffic: 4 (the default) or 6 (IPv6 pods on an
	// IPv6-only network over an IPv6 underlay).
	Family    int
	StateFile string // passed to the lab, for `lab down` after a crash
	// Idle is the idle window: once every subject is up and before any traffic, each
	// daemon's CPU is sampled from /proc/<pid>/stat over this long (IdleCPUPct).
	// 0 leaves it out.
	Idle time.Duration
	// Progress receives one line per step while the matrix runs (may be nil).
	Progress io.Writer
}

// withDefaults is o with the defaults in place of zero values.
func (o Options) withDefaults() Options {
	if o.Reps <= 0 {
		o.Reps = 3
	}
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	if o.Pings <= 0 {
		o.Pings = 200
	}
	if o.Family == 0 {
		o.Family = 4
	}
	return o
}

// Order returns the subject order of repetition rep: a Latin square, so over n
// repetitions every subject runs once in every position; odd repetitions run
// backwards, so subjects also change neighbours.
func Order(n, rep int) []int {
	o := make([]int, n)
	for i := range o {
		if rep%2 == 0 {
			o[i] = (rep + i) % n
		} else {
			o[i] = ((rep-i)%n + n) % n
		}
	}
	return o
}

// Run builds a lab with two hosts per subject, sets every subject up, runs the
// workloads rep times in alternating order, tears everything down and returns the
// report. A subject that fails is reported with its error; the others go on.
func Run(ctx context.Context, o Options, log *zap.Logger) (*Report, error) {
	o = o.withDefaults()
	if o.Family != 4 && o.Family != 6 {
		return nil, fmt.Errorf("family %d: want 4 or 6", o.Family)
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	rep := &Report{Started: time.Now(), Reps: o.Reps, Family: o.Family, DurationS: o.Duration.Seconds()}
	weftd := ""
	for _, s := range o.Subjects {
		rep.Rows = append(rep.Rows, Row{Subject: s.Name, Kind: s.Kind})
		if s.Kind == KindWeft && weftd == "" {
			weftd = s.Binary
		}
	}
	rep.record(weftd)
	fmt.Fprintf(progress, "building the lab: %d hosts, router, etcd\n", 2*len(o.Subjects))
	l, err := lab.New(ctx, lab.Spec{Hosts: HostSpecs(o.Subjects), StateFile: o.StateFile}, log)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	paths := make([]*Path, len(o.Subjects))
	for i, s := range o.Subjects {
		if why := s.NotApplicable(o.Family); why != "" {
			rep.Rows[i].NotApplicable = why
			fmt.Fprintf(progress, "  setup %-16s n/a: %s\n", s.Name, why)
			continue
		}
		start := time.Now()
		p, err := s.Setup(ctx, l, o.Family)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			rep.Rows[i].Errors = append(rep.Rows[i].Errors, err.Error())
			fmt.Fprintf(progress, "  setup %-16s FAILED: %s\n", s.Name, firstLine(err.Error()))
			continue
		}
		paths[i] = &p
		fmt.Fprintf(progress, "  setup %-16s ok (%.1fs)\n", s.Name, time.Since(start).Seconds())
	}
	if o.Idle > 0 {
		fmt.Fprintf(progress, "idle: every subject up, no traffic, daemons' CPU over %s\n", o.Idle)
		if err := measureIdle(ctx, rep, paths, o.Idle); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		for i, row := range rep.Rows {
			if row.IdleCPUPct != nil {
				fmt.Fprintf(progress, "  idle  %-16s %.2f %% of a core\n", o.Subjects[i].Name, *row.IdleCPUPct)
			}
		}
	}
	for r := 0; r < o.Reps; r++ {
		for _, i := range Order(len(o.Subjects), r) {
			if paths[i] == nil {
				continue
			}
			fmt.Fprintf(progress, "rep %d/%d  %-16s ", r+1, o.Reps, o.Subjects[i].Name)
			f, errs := measure(ctx, *paths[i], o)
			if ctx.Err() != nil {
				fmt.Fprintln(progress, "interrupted")
				return nil, ctx.Err()
			}
			rep.Rows[i].Reps = append(rep.Rows[i].Reps, f)
			rep.Rows[i].Errors = append(rep.Rows[i].Errors, errs...)
			fmt.Fprintln(progress, summary(f, errs))
		}
	}
	rep.Finish()
	return rep, l.Close()
}

func summary(f Figures, errs []string) string {
	var parts []string
	for _, m := range Metrics {
		if _, ok := f[m.Key]; ok {
			parts = append(parts, fmt.Sprintf("%s %s %s", m.Title, fmtValue(m.Key, f), m.Unit))
		}
	}
	if len(errs) > 0 {
		parts = append(parts, fmt.Sprintf("%d error(s)", len(errs)))
	}
	return strings.Join(parts, ", ")
}

// measure runs each workload once over p. Pings go first, on a quiet path: after a
// saturating flood the host takes seconds to settle (queues, the VM's CPU credit),
// and an RTT taken then measures that recovery more than the path.
func measure(ctx context.Context, p Path, o Options) (Figures, []string) {
	f := Figures{}
	var errs []string
	if pr, err := Ping(ctx, p, o.Pings, 10*time.Millisecond); err != nil {
		errs = append(errs, "ping: "+err.Error())
	} else {
		f[RTTMedian] = float64(pr.Median) / float64(time.Microsecond)
		f[RTTP99] = float64(pr.P99) / float64(time.Microsecond)
	}
	if t, cost, err := TCP(ctx, p, o.Duration, 1); err != nil {
		errs = append(errs, "tcp: "+err.Error())
	} else {
		f[TCPGbps] = t.Gbps
		f[TotalCPUPerGB] = cost.TotalPerGB
		if len(p.Daemons) > 0 {
			f[CPUPerGBs] = cost.DaemonPerGB
		}
	}
	if t, _, err := TCP(ctx, p, o.Duration, 4); err != nil {
		errs = append(errs, "tcp -P 4: "+err.Error())
	} else {
		f[TCP4Gbps] = t.Gbps
	}
	if u, err := UDP64(ctx, p, o.Duration); err != nil {
		errs = append(errs, "udp64: "+err.Error())
	} else {
		f[UDPKpps] = u.PPS / 1e3
		f[UDPLossPct] = u.LossPercent
	}
	return f, errs
}

// measureIdle samples the CPU time of every path's daemons at the start and the end
// of window, all in the same window, and sets each row's IdleCPUPct to its busier
// daemon's share of one core. A daemon that cannot be read (it exited) is an error
// of its row.
func measureIdle(ctx context.Context, rep *Report, paths []*Path, window time.Duration) error {
	type sample struct {
		row     int
		d       *lab.Daemon
		before  time.Duration
		readErr error
	}
	var samples []sample
	for i, p := range paths {
		if p == nil {
			continue
		}
		for _, d := range p.Daemons {
			c, err := d.CPUTime()
			samples = append(samples, sample{row: i, d: d, before: c, readErr: err})
		}
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(window):
	}
	elapsed := time.Since(start)
	rep.IdleS = window.Seconds()
	for _, s := range samples {
		row := &rep.Rows[s.row]
		after, err := s.d.CPUTime()
		if err == nil {
			err = s.readErr
		}
		if err != nil {
			row.Errors = append(row.Errors, fmt.Sprintf("idle CPU of %s: %v", s.d.Host.Name, err))
			continue
		}
		pct := IdlePct(after-s.before, elapsed)
		if row.IdleCPUPct == nil || pct > *row.IdleCPUPct {
			row.IdleCPUPct = &pct
		}
	}
	return nil
}

// IdlePct is cpu as a percentage of one core over elapsed.
func IdlePct(cpu, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return 100 * cpu.Seconds() / elapsed.Seconds()
}

func kernel() string {
	data, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// WriteFiles writes report.md, report.json and report.svg into dir.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report dir: %w", err)
	}
	for name, write := range map[string]func(io.Writer) error{
		"report.md": r.WriteMarkdown, "report.json": r.WriteJSON, "report.svg": r.WriteSVG,
	} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		err = write(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("report %s: %w", name, err)
		}
	}
	return nil
}
