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
	backend := fs.String("backend", "vxlan", "backend of the network config: vxlan, host-gw, udp, alloc or wireguard")
	sites := fs.Bool("sites", false, "wireguard: weftd runs with --site and the simulated hosts are in another site, so it chooses each one's way (and, none answering, leaves each first way)")
	weftd := fs.String("weftd", defaultWeftd(), "weftd binary")
	churn := fs.Duration("churn", time.Minute, "how long to change leases")
	rate := fs.Int("rate", 50, "lease changes per second during the churn")
	idle := fs.Duration("idle", 10*time.Second, "window of the idle CPU measurements")
	noRestart := fs.Bool("no-restart", false, "leave out the etcd restart")
	noOvertake := fs.Bool("no-overtake", false, "leave out the compaction that overtakes the daemon's watch")
	out := fs.String("out", "", "directory for scale.md, scale.json and scale.svg")
	from := fs.String("report-from", "", "render the reports of an earlier run's scale.json (to --out) instead of running")
	kube := fs.Bool("kube", false, "Kubernetes mode: peer Nodes in a real kube-apiserver instead of leases in etcd (vxlan; "+
		"--idle is then the rest before RSS is read again, default 60s; --churn 0 leaves the churn out)")
	repo := fs.String("repo", ".", "the weft repository (--kube: test/kube builds the API server, deploy/rbac.yml is the daemons' RBAC)")
	verbose := fs.Bool("v", false, "debug logging")
	var extra daemonFlag
	fs.Var(&extra, "daemon", "NAME=PATH of another flanneld-compatible daemon, measured the same way (repeatable)")
	var variants weftdEnvFlag
	fs.Var(&variants, "weftd-env", "NAME=VAR=VALUE[,VAR=VALUE]: weftd measured once more as NAME with these variables "+
		"in its environment, e.g. weftd-noprobe=WEFT_PROBE=false (repeatable; etcd mode)")
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
	if *kube && len(variants) > 0 {
		return fmt.Errorf("%w: --weftd-env is for etcd mode only", errUsage)
	}
	if *kube {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		return kubeScale(ctx, kubeScaleArgs{sizes: ns, weftd: *weftd, extra: extra, idle: *idle, idleSet: set["idle"],
			churn: *churn, rate: *rate, repo: *repo, out: *out, backendSet: set["backend"], verbose: *verbose}, stdout, stderr)
	}
	switch *backend {
	case "vxlan", "host-gw", "udp", "alloc", "wireguard":
	default:
		return fmt.Errorf("%w: --backend %q is none of vxlan, host-gw, udp, alloc, wireguard", errUsage, *backend)
	}
	if *sites && *backend != "wireguard" {
		return fmt.Errorf("%w: --sites is for --backend wireguard", errUsage)
	}
	if *rate < 1 || *rate > 1000 {
		return fmt.Errorf("%w: --rate %d is not within 1..1000", errUsage, *rate)
	}
	if err := needWeftd(*weftd); err != nil {
		return err
	}
	subjects := []bench.ScaleSubject{{Name: "weftd", Binary: *weftd, Weft: true}}
	for _, v := range variants {
		subjects = append(subjects, bench.ScaleSubject{Name: v.name, Binary: *weftd, Weft: true, Env: v.env})
	}
	for _, e := range extra {
		subjects = append(subjects, bench.ScaleSubject{Name: e[0], Binary: e[1]})
	}
	rep, err := bench.RunScale(ctx, bench.ScaleOptions{
		Sizes: ns, Backend: *backend, Sites: *sites, Subjects: subjects, Idle: *idle, Churn: *churn, Rate: *rate,
		NoRestart: *noRestart, NoOvertake: *noOvertake, StateFile: filepath.Join(stateDir(), "run.json"), Progress: stderr,
	}, newLogger(stderr, *verbose))
	return writeScale(rep, err, *out, stdout)
}

// weftdVariant is weftd measured under another name with more environment.
type weftdVariant struct {
	name string
	env  []string
}

// weftdEnvFlag collects --weftd-env NAME=VAR=VALUE[,VAR=VALUE].
type weftdEnvFlag []weftdVariant

func (f *weftdEnvFlag) String() string { return fmt.Sprint(*f) }

func (f *weftdEnvFlag) Set(v string) error {
	name, vars, ok := strings.Cut(v, "=")
	if !ok || name == "" || strings.ContainsAny(name, "/ ") {
		return fmt.Errorf("want NAME=VAR=VALUE[,VAR=VALUE], got %q", v)
	}
	env := strings.Split(vars, ",")
	for _, e := range env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("want NAME=VAR=VALUE[,VAR=VALUE], got %q", v)
		}
	}
	*f = append(*f, weftdVariant{name, env})
	return nil
}

// kubeScaleArgs are scale's flags in Kubernetes mode.
type kubeScaleArgs struct {
	sizes               []int
	weftd, repo, out    string
	extra               daemonFlag
	idle, churn         time.Duration
	idleSet, backendSet bool
	rate                int
	verbose             bool
}

// kubeScale is scale --kube.
func kubeScale(ctx context.Context, a kubeScaleArgs, stdout, stderr io.Writer) error {
	if a.backendSet {
		return fmt.Errorf("%w: --kube measures the vxlan backend only", errUsage)
	}
	for _, n := range a.sizes {
		if n > bench.KubeMaxNodes {
			return fmt.Errorf("%w: %d Nodes do not fit in the lab's overlay /16 (at most %d)", errUsage, n, bench.KubeMaxNodes)
		}
	}
	if a.rate < 1 || a.rate > 1000 {
		return fmt.Errorf("%w: --rate %d is not within 1..1000", errUsage, a.rate)
	}
	if _, err := os.Stat(filepath.Join(a.repo, "deploy", "rbac.yml")); err != nil {
		return fmt.Errorf("%w: --repo %s is not the weft repository: %w", errUsage, a.repo, err)
	}
	if err := needWeftd(a.weftd); err != nil {
		return err
	}
	rest := a.idle
	if !a.idleSet {
		rest = time.Minute
	}
	subjects := []bench.ScaleSubject{{Name: "weftd", Binary: a.weftd, Weft: true}}
	for _, e := range a.extra {
		subjects = append(subjects, bench.ScaleSubject{Name: e[0], Binary: e[1]})
	}
	rep, err := bench.RunKubeScale(ctx, bench.KubeScaleOptions{
		Sizes: a.sizes, Subjects: subjects, Rest: rest, Churn: a.churn, NoChurn: a.churn == 0, Rate: a.rate,
		RepoRoot: a.repo, StateFile: filepath.Join(stateDir(), "run.json"), Progress: stderr,
	}, newLogger(stderr, a.verbose))
	return writeScale(rep, err, a.out, stdout)
}

// writeScale prints a run's table and writes its reports to out (when given).
func writeScale(rep *bench.ScaleReport, err error, out string, stdout io.Writer) error {
	if rep != nil {
		fmt.Fprintln(stdout)
		if werr := rep.WriteTable(stdout); werr != nil && err == nil {
			err = werr
		}
		if out != "" {
			if werr := rep.WriteFiles(out); werr != nil && err == nil {
				err = werr
			} else if werr == nil {
				fmt.Fprintf(stdout, "\nreports: %s/scale.md, scale.json, scale.svg\n", out)
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
