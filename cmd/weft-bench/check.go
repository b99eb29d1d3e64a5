package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/weftnet/weft/bench"
)

// checkSubjects names the rows bench.Goals compare, in the matrix's order.
func checkSubjects() string {
	want := map[string]bool{}
	for _, g := range bench.Goals {
		want[g.Subject] = true
		if g.Ref != "" {
			want[g.Ref] = true
		}
	}
	var names []string
	for _, s := range bench.Subjects("", nil) {
		if want[s.Name] {
			names = append(names, s.Name)
		}
	}
	return strings.Join(names, ",")
}

// checkCmd is `weft-bench check`: the goals of bench.Goals against one run, either a
// new run of the rows they name (or --subjects) or, with --in, an earlier run's
// report.json. A missed goal is an error (exit status 1).
func checkCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "an earlier run: its report.json, or the directory holding it (nothing is run)")
	reps := fs.Int("reps", 3, "repetitions of every subject x workload")
	dur := fs.Duration("duration", 5*time.Second, "length of each iperf3 workload")
	pings := fs.Int("pings", 200, "pings per repetition (every 10 ms)")
	idle := fs.Duration("idle", bench.IdleGoalWindow*time.Second, "idle window for the idle CPU goal")
	out := fs.String("out", "", "directory for the run's report.md, report.json and report.svg")
	weftd := fs.String("weftd", defaultWeftd(), "weftd binary")
	only := fs.String("subjects", checkSubjects(), "comma-separated subjects to run")
	verbose := fs.Bool("v", false, "debug logging")
	var extra daemonFlag
	fs.Var(&extra, "daemon", "NAME=PATH of another flanneld-compatible daemon, run with backend udp (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: check takes no arguments, got %q", errUsage, fs.Args())
	}
	var rep *bench.Report
	if *in != "" {
		var err error
		if rep, err = readReport(*in); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "run: %s\n", rep.Machine())
	} else {
		if *idle < 0 {
			return fmt.Errorf("%w: --idle %s: want 0 or more", errUsage, *idle)
		}
		subjects, err := pick(bench.Subjects(*weftd, extra), *only)
		if err != nil {
			return err
		}
		if err := needWeftd(*weftd); err != nil {
			return err
		}
		rep, err = bench.Run(ctx, bench.Options{
			Subjects: subjects, Reps: *reps, Duration: *dur, Pings: *pings, Idle: *idle,
			StateFile: filepath.Join(stateDir(), "run.json"), Progress: stderr,
		}, newLogger(stderr, *verbose))
		if err != nil {
			return err
		}
		if err := writeReport(rep, *out, stdout); err != nil {
			return err
		}
	}
	res := rep.Check(nil)
	fmt.Fprintln(stdout)
	if err := bench.WriteGoals(stdout, res); err != nil {
		return err
	}
	if ok, missed := bench.GoalsMet(res); !ok {
		return fmt.Errorf("%d of %d goals missed", missed, len(res))
	}
	return nil
}

// readReport reads a run's report.json: path, or path/report.json for a directory.
func readReport(path string) (*bench.Report, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "report.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	var rep bench.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("check: %s: %w", path, err)
	}
	if len(rep.Rows) == 0 {
		return nil, fmt.Errorf("check: %s: a report without rows", path)
	}
	return &rep, nil
}
