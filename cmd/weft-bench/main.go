// Command weft-bench builds a one-machine lab of network namespaces and measures
// weft's backends beside plain kernel configurations and other flanneld-compatible
// daemons.
//
//	weft-bench lab up|down|status   a lab to poke at with `ip netns exec`
//	weft-bench run                  the benchmark matrix, reports in --out
//	weft-bench check                a run held to its goals (bench.Goals); exit 1 when one is missed
//	weft-bench demo                 what weft does and how fast, in two minutes
//	weft-bench scale                the control plane with thousands of simulated hosts
//	weft-bench soak                 pod traffic through faults, scored
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/weftnet/weft/bench"
)

// stateDir holds lab.json (a lab from `lab up`), run.json (a run or demo in
// progress) and lab.log; WEFT_BENCH_STATE_DIR moves it (tests do).
func stateDir() string {
	if d := os.Getenv("WEFT_BENCH_STATE_DIR"); d != "" {
		return d
	}
	return "/run/weft-bench"
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: weft-bench <command> [flags]

  lab up [--hosts N] [--lan2 N] [--backend udp|vxlan|host-gw|none] [--weftd PATH]
  lab down
  lab status
  run  [--reps N] [--duration D] [--idle D] [--out DIR] [--subjects a,b] [--family 4|6] [--daemon NAME=PATH]... [--weftd PATH]
  check [--in DIR|FILE] | [--reps N] [--duration D] [--idle D] [--out DIR] [--subjects a,b] [--weftd PATH]
        a run's goals (ratios between its rows): a new run of the rows they name, or
        --in an earlier run's report.json; exit status 1 when a goal is missed
  sites [--reps N] [--duration D] [--out DIR] [--weftd PATH]
        weftd's wireguard ways across two NATs: direct, punched, relayed
  demo [--weftd PATH] [--duration D] [--daemon NAME=PATH]...
  scale [--hosts N] [--sizes a,b] [--backend vxlan|host-gw|udp|alloc|wireguard [--sites]] [--churn D] [--rate R]
        [--idle D] [--no-restart] [--no-overtake] [--report-from scale.json] [--out DIR] [--daemon NAME=PATH]... [--weftd PATH]
  scale --kube [--sizes a,b] [--idle D] [--churn D] [--rate R] [--repo DIR] [--out DIR] [--daemon NAME=PATH]... [--weftd PATH]
  soak [--duration D] [--backend vxlan|udp|host-gw] [--hosts N] [--every D] [--seed N] [--json FILE] [--weftd PATH]

Run as root. Every namespace, link and process is removed at the end, on errors and
on Ctrl-C; 'lab down' removes what a killed run left.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "lab":
		err = labCmd(ctx, args[1:], stdout, stderr)
	case "run":
		err = runCmd(ctx, args[1:], stdout, stderr)
	case "check":
		err = checkCmd(ctx, args[1:], stdout, stderr)
	case "sites":
		err = sitesCmd(ctx, args[1:], stdout, stderr)
	case "demo":
		err = demoCmd(ctx, args[1:], stdout, stderr)
	case "scale":
		err = scaleCmd(ctx, args[1:], stdout, stderr)
	case "soak":
		err = soakCmd(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "weft-bench: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errUsage) {
		fmt.Fprintf(stderr, "weft-bench: %v\n", err)
		return 2
	}
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "weft-bench: interrupted; everything was removed")
			return 130
		}
		fmt.Fprintf(stderr, "weft-bench: %v\n", err)
		return 1
	}
	return 0
}

var errUsage = errors.New("usage")

// parseFlags parses args into fs; a bad flag is a usage error (exit code 2), -h is
// flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%w: %w", errUsage, err)
}

func newLogger(w io.Writer, verbose bool) *zap.Logger {
	lvl := zapcore.WarnLevel
	if verbose {
		lvl = zapcore.DebugLevel
	}
	enc := zap.NewDevelopmentEncoderConfig()
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(w), lvl))
}

// defaultWeftd is bin/weftd beside this binary.
func defaultWeftd() string {
	exe, err := os.Executable()
	if err != nil {
		return "bin/weftd"
	}
	return filepath.Join(filepath.Dir(exe), "weftd")
}

// daemonFlag collects --daemon NAME=PATH.
type daemonFlag [][2]string

func (d *daemonFlag) String() string { return fmt.Sprint(*d) }

func (d *daemonFlag) Set(v string) error {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || path == "" || strings.ContainsAny(name, "/ ") {
		return fmt.Errorf("want NAME=PATH, got %q", v)
	}
	*d = append(*d, [2]string{name, path})
	return nil
}

func needWeftd(path string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("weftd not found at %s (run make build, or give --weftd): %w", path, err)
	}
	return nil
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	reps := fs.Int("reps", 3, "repetitions of every subject x workload")
	dur := fs.Duration("duration", 5*time.Second, "length of each iperf3 workload")
	pings := fs.Int("pings", 200, "pings per repetition (every 10 ms)")
	idle := fs.Duration("idle", bench.IdleGoalWindow*time.Second, "idle window: every subject up, no traffic, daemons' CPU sampled (0: none)")
	out := fs.String("out", "", "directory for report.md, report.json and report.svg")
	weftd := fs.String("weftd", defaultWeftd(), "weftd binary")
	only := fs.String("subjects", "", "comma-separated subset of subjects (default all)")
	verbose := fs.Bool("v", false, "debug logging")
	family := fs.Int("family", 4, "IP version of the traffic: 4, or 6 (IPv6 pods on an IPv6-only network over an IPv6 underlay)")
	var extra daemonFlag
	fs.Var(&extra, "daemon", "NAME=PATH of another flanneld-compatible daemon, run with backend udp (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: run takes no arguments, got %q", errUsage, fs.Args())
	}
	if *family != 4 && *family != 6 {
		return fmt.Errorf("%w: --family %d: want 4 or 6", errUsage, *family)
	}
	subjects, err := pick(bench.Subjects(*weftd, extra), *only)
	if err != nil {
		return err
	}
	for _, s := range subjects {
		if s.Kind == bench.KindWeft {
			if err := needWeftd(*weftd); err != nil {
				return err
			}
			break
		}
	}
	if *idle < 0 {
		return fmt.Errorf("%w: --idle %s: want 0 or more", errUsage, *idle)
	}
	rep, err := bench.Run(ctx, bench.Options{
		Subjects: subjects, Reps: *reps, Duration: *dur, Pings: *pings, Family: *family, Idle: *idle,
		StateFile: filepath.Join(stateDir(), "run.json"), Progress: stderr,
	}, newLogger(stderr, *verbose))
	if err != nil {
		return err
	}
	if err := writeReport(rep, *out, stdout); err != nil {
		return err
	}
	if !rep.HasGoalRows() {
		return nil
	}
	fmt.Fprintln(stdout, "\ngoals (weft-bench check --in DIR holds the run to them):")
	return bench.WriteGoals(stdout, rep.Check(nil))
}

// sitesCmd is `weft-bench sites`: bench.RunSites.
func sitesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sites", flag.ContinueOnError)
	fs.SetOutput(stderr)
	reps := fs.Int("reps", 3, "repetitions of every row x workload")
	dur := fs.Duration("duration", 5*time.Second, "length of each iperf3 workload")
	pings := fs.Int("pings", 200, "pings per repetition (every 10 ms)")
	out := fs.String("out", "", "directory for report.md, report.json and report.svg")
	weftd := fs.String("weftd", defaultWeftd(), "weftd binary")
	verbose := fs.Bool("v", false, "debug logging")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: sites takes no arguments, got %q", errUsage, fs.Args())
	}
	if err := needWeftd(*weftd); err != nil {
		return err
	}
	rep, err := bench.RunSites(ctx, *weftd, bench.Options{Reps: *reps, Duration: *dur, Pings: *pings,
		StateFile: filepath.Join(stateDir(), "run.json"), Progress: stderr}, newLogger(stderr, *verbose))
	if err != nil {
		return err
	}
	return writeReport(rep, *out, stdout)
}

// writeReport prints rep's record and table to stdout and, with out set, writes its
// files there.
func writeReport(rep *bench.Report, out string, stdout io.Writer) error {
	fmt.Fprintln(stdout)
	if m := rep.Machine(); m != "" {
		fmt.Fprintf(stdout, "run: %s\n", m)
	}
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if out != "" {
		if err := rep.WriteFiles(out); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nreports: %s/report.md, report.json, report.svg\n", out)
	}
	return nil
}

func pick(all []bench.Subject, only string) ([]bench.Subject, error) {
	if only == "" {
		return all, nil
	}
	var out []bench.Subject
	for _, n := range strings.Split(only, ",") {
		found := false
		for _, s := range all {
			if s.Name == strings.TrimSpace(n) {
				out, found = append(out, s), true
			}
		}
		if !found {
			var names []string
			for _, s := range all {
				names = append(names, s.Name)
			}
			return nil, fmt.Errorf("%w: unknown subject %q (have %s)", errUsage, n, strings.Join(names, ", "))
		}
	}
	return out, nil
}
