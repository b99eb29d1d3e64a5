package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/weftnet/weft/bench"
)

// scaleSizes are the points of the curve up to --hosts: the standard ones below it,
// then --hosts itself (or only the --sizes given).
func scaleSizes(hosts int, sizes string) ([]int, error) {
	var out []int
	if sizes != "" {
		for _, f := range strings.Split(sizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%w: --sizes: %q is not a positive number", errUsage, f)
			}
			out = append(out, n)
		}
	} else {
		for _, n := range []int{100, 500, 1000, 2000} {
			if n < hosts {
				out = append(out, n)
			}
		}
		out = append(out, hosts)
	}
	sort.Ints(out)
	for _, n := range out {
		if n > 8000 {
			return nil, fmt.Errorf("%w: %d hosts do not fit in the lab's overlay /16", errUsage, n)
		}
	}
	return out, nil
}

func scaleCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hosts := fs.Int("hosts", 1000, "simulated hosts (leases in etcd) at the last point of the curve")
	sizes := fs.String("sizes", "", "comma-separated sizes instead of 100,500,1000,2000 below --hosts and --hosts")
	backend := fs.String("backend", "vxlan", "backend of the network config: vxlan, host-gw, udp or alloc")
	weftd := fs.String("weftd", defaultWeftd(), "weftd binary")
	churn := fs.Duration("churn", time.Minute, "how long to change leases")
	rate := fs.Int("rate", 50, "lease changes per second during the churn")
	idle := fs.Duration("idle", 10*time.Second, "window of the idle CPU measurements")
	noRestart := fs.Bool("no-restart", false, "leave out the etcd restart")
	noOvertake := fs.Bool("no-overtake", false, "leave out the compaction that overtakes the daemon's watch")
	out := fs.String("out", "", "directory for scale.md, scale.json and scale.svg")
	from := fs.String("report-from", "", "render the reports of an earlier run's scale.json (to --out) instead of running")
	verbose := fs.Bool("v", false, "debug logging")
	var extra daemonFlag
	fs.Var(&extra, "daemon", "NAME=PATH of another flanneld-compatible daemon, measured the same way (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: scale takes no arguments, got %q", errUsage, fs.Args())
	}
	if *from != "" {
		return scaleReportFrom(*from, *out, stdout)
	}
	ns, err := scaleSizes(*hosts, *sizes)
	if err != nil {
		return err
	}
	switch *backend {
	case "vxlan", "host-gw", "udp", "alloc":
	default:
		return fmt.Errorf("%w: --backend %q is none of vxlan, host-gw, udp, alloc", errUsage, *backend)
	}
	if *rate < 1 || *rate > 1000 {
		return fmt.Errorf("%w: --rate %d is not within 1..1000", errUsage, *rate)
	}
	if err := needWeftd(*weftd); err != nil {
		return err
	}
	subjects := []bench.ScaleSubject{{Name: "weftd", Binary: *weftd, Weft: true}}
	for _, e := range extra {
		subjects = append(subjects, bench.ScaleSubject{Name: e[0], Binary: e[1]})
	}
	rep, err := bench.RunScale(ctx, bench.ScaleOptions{
		Sizes: ns, Backend: *backend, Subjects: subjects, Idle: *idle, Churn: *churn, Rate: *rate,
		NoRestart: *noRestart, NoOvertake: *noOvertake, StateFile: filepath.Join(stateDir(), "run.json"), Progress: stderr,
	}, newLogger(stderr, *verbose))
	if rep != nil {
		fmt.Fprintln(stdout)
		if werr := rep.WriteTable(stdout); werr != nil && err == nil {
			err = werr
		}
		if *out != "" {
			if werr := rep.WriteFiles(*out); werr != nil && err == nil {
				err = werr
			} else if werr == nil {
				fmt.Fprintf(stdout, "\nreports: %s/scale.md, scale.json, scale.svg\n", *out)
			}
		}
	}
	return err
}

// scaleReportFrom renders an earlier run's scale.json again: the table to stdout, the
// files to out when given.
func scaleReportFrom(path, out string, stdout io.Writer) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rep bench.ScaleReport
	if err := json.Unmarshal(data, &rep); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if out == "" {
		return nil
	}
	return rep.WriteFiles(out)
}
