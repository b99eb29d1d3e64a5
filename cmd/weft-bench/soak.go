package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/weftnet/weft/bench"
)

// soakCmd runs weft-bench soak: pod traffic between weftd hosts through scheduled
// faults, then the score. It fails when a lease or subnet was lost or a pod is
// unreachable at the end.
func soakCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dur := fs.Duration("duration", 10*time.Minute, "length of the soak")
	backend := fs.String("backend", "vxlan", "backend: vxlan, udp or host-gw")
	hosts := fs.Int("hosts", 4, "hosts (at least 4)")
	every := fs.Duration("every", 5*time.Second, "time between events")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of the event order")
	jsonOut := fs.String("json", "", "also write the score as JSON to this file")
	weftd := fs.String("weftd", defaultWeftd(), "weftd binary")
	verbose := fs.Bool("v", false, "debug logging")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: soak takes no arguments, got %q", errUsage, fs.Args())
	}
	switch *backend {
	case "vxlan", "udp", "host-gw":
	default:
		return fmt.Errorf("%w: --backend %q: want vxlan, udp or host-gw", errUsage, *backend)
	}
	if *hosts < 4 || *dur <= 0 || *every <= 0 {
		return fmt.Errorf("%w: want --hosts 4 or more and positive --duration and --every", errUsage)
	}
	if err := needWeftd(*weftd); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "soak: %s, %d hosts, %v, an event every %v, seed %d\n", *backend, *hosts, *dur, *every, *seed)
	rep, err := bench.Soak(ctx, bench.SoakOptions{Weftd: *weftd, Backend: *backend, Hosts: *hosts,
		Duration: *dur, Every: *every, Seed: *seed, Progress: stderr,
		StateFile: filepath.Join(stateDir(), "run.json")}, newLogger(stderr, *verbose))
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	if !rep.OK() {
		return fmt.Errorf("soak failed: %d leases lost, %d subnet changes, unreachable %v", rep.LeasesLost, rep.SubnetChanges, rep.Unreachable)
	}
	return nil
}
