package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/bench"
	"github.com/weftnet/weft/bench/lab"
)

func heading(w io.Writer, s string) {
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			fmt.Fprintf(w, "\n\033[1m== %s ==\033[0m\n", s)
			return
		}
	}
	fmt.Fprintf(w, "\n== %s ==\n", s)
}

func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	weftd := fs.String("weftd", defaultWeftd(), "weftd binary")
	dur := fs.Duration("duration", 2*time.Second, "length of each workload in the short run")
	idle := fs.Duration("idle", 10*time.Second, "idle window of the short run (make bench-check holds weftd udp to 60 s)")
	verbose := fs.Bool("v", false, "debug logging")
	var extra daemonFlag
	fs.Var(&extra, "daemon", "NAME=PATH of another flanneld-compatible daemon for the table, run with backend udp (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := needWeftd(*weftd); err != nil {
		return err
	}
	log := newLogger(stderr, *verbose)
	start := time.Now()
	heading(stdout, "weft demo")
	fmt.Fprint(stdout, `weftd is an overlay network daemon, a drop-in for flanneld. Every host runs one: it
leases a /24 of the pod network 198.18.0.0/16 from etcd, writes it to subnet.env for
the CNI plugin, and carries traffic to the other hosts' pods with one of three
backends: udp (weft's fast userspace forwarder), vxlan (kernel VXLAN) or host-gw
(plain routes). This demo builds a lab of network namespaces on this machine:
hosts a and b on LAN 192.0.2.0/24, host c on LAN 198.51.100.0/24 behind a router
that also runs etcd. Everything is removed at the end.
`)
	var failed []string
	for _, bt := range []string{"udp", "vxlan", "host-gw"} {
		if err := demoBackend(ctx, stdout, log, *weftd, bt); err != nil {
			if ctx.Err() != nil {
				return err
			}
			fmt.Fprintf(stdout, "FAILED: %s\n", firstLine(err.Error()))
			failed = append(failed, bt)
		}
	}
	heading(stdout, "How fast: a short run of the benchmark matrix")
	fmt.Fprintf(stdout, `Each row carries pod-to-pod traffic between two hosts: the bare underlay (host to
host, no overlay), kernel VXLAN and kernel routes set up by hand as references, and
weftd with each backend. One repetition of %s per workload (make bench runs more).
`, *dur)
	for _, e := range extra {
		fmt.Fprintf(stdout, "Row %s is %s with its udp backend, on the same topology.\n", e[0], e[1])
	}
	rep, err := bench.Run(ctx, bench.Options{
		Subjects: bench.Subjects(*weftd, extra), Reps: 1, Duration: *dur, Pings: 100, Idle: *idle,
		StateFile: filepath.Join(stateDir(), "run.json"), Progress: stdout,
	}, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nrun: %s\n", rep.Machine())
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	fmt.Fprint(stdout, `
How to read it: TCP is one iperf3 stream, TCP -P 4 four of them; UDP 64 B is the rate
of small packets delivered; "vs kvxlan" divides by kernel VXLAN's figure from the same
run. RTT is ping's median round trip. daemon CPU is the CPU time the daemons spent per
GB moved by one TCP stream (the kernel rows have no daemon); total CPU is the whole
machine's busy time (user, system, irq, softirq from /proc/stat) per GB of the same
run, so the kernel's own packet work is charged to every row, iperf3 included. udp is
the backend for hosts without VXLAN and across L3 networks; host-gw and vxlan are the
kernel doing the work, programmed by weftd. socat-udp is a floor for userspace: socat
on each host moving packets between a TUN device and a UDP socket and nothing else, so
its round trip is about the least any TUN-and-UDP daemon can have on this machine.
weftd-wireguard is weftd's wireguard backend with its device in userspace (the
wireguard-go engine inside weftd); wireguard-go is Debian's wireguard-go and wg set up
by hand on each host, the same engine as its authors ship it, for reference.
weftd-udp-busy is the udp backend with "BusyPoll": its workers poll instead of
sleeping while packets keep coming, which buys round-trip time with CPU. idle CPU is
each daemon's CPU while every row was up and nothing moved, in percent of one core.
RTTs on a small VM swing a lot from run to run: compare rows of one run, not across runs.
`)
	fmt.Fprintf(stdout, "\nThe goals `make bench-check` holds a run to, against this short one (one repetition,\nan idle window of %s; make bench-check runs 3 repetitions and a 60 s idle window):\n\n", *idle)
	if err := bench.WriteGoals(stdout, rep.Check(nil)); err != nil {
		return err
	}
	heading(stdout, fmt.Sprintf("Done in %.0fs: every namespace, link and process was removed", time.Since(start).Seconds()))
	if len(failed) > 0 {
		return fmt.Errorf("backend(s) failed: %s", strings.Join(failed, ", "))
	}
	for _, row := range rep.Rows {
		if len(row.Errors) > 0 {
			return fmt.Errorf("subject %s failed in the benchmark run", row.Subject)
		}
	}
	return nil
}

func demoBackend(ctx context.Context, w io.Writer, log *zap.Logger, weftd, bt string) error {
	heading(w, "Backend "+bt)
	spec := lab.Spec{Hosts: []lab.HostSpec{{Name: "a"}, {Name: "b"}, {Name: "c", LAN: lab.LAN2}},
		StateFile: filepath.Join(stateDir(), "run.json")}
	l, err := lab.New(ctx, spec, log)
	if err != nil {
		return err
	}
	defer l.Close()
	hosts := l.Hosts()
	if bt == "host-gw" {
		hosts = hosts[:2]
		fmt.Fprintln(w, "host-gw routes pod subnets via the peer's own address, so peers must share a LAN: only a and b take part.")
	}
	fmt.Fprintf(w, "network config in etcd: %s\n", lab.NetworkConfig(bt))
	ds, pods, err := startWeft(ctx, l, hosts, weftd, bt)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "weftd started on every host; each leased a subnet and wrote subnet.env:")
	for _, d := range ds {
		data, err := os.ReadFile(d.SubnetFile())
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  host %s (%s): %s\n", d.Host.Name, d.Host.Addr, strings.Join(strings.Fields(string(data)), " "))
	}
	leases, err := l.Leases(ctx, "")
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "leases in etcd (/coreos.com/network/subnets/...):")
	for _, k := range lab.SortedKeys(leases) {
		fmt.Fprintf(w, "  %-15s %s\n", k, leases[k])
	}
	fmt.Fprintln(w, "a pod on every host (a namespace on bridge cni0, address from subnet.env) pings the others:")
	pingFailed := false
	for i, from := range pods {
		for j, to := range pods {
			if i == j {
				continue
			}
			p := bench.Path{Client: from.NS, Server: to.NS, Addr: to.Addr}
			err := bench.WaitPing(ctx, from.NS, to.Addr, 10*time.Second)
			var r bench.PingResult
			if err == nil {
				r, err = bench.Ping(ctx, p, 3, 100*time.Millisecond)
			}
			var verdict string
			if err != nil {
				verdict = "FAILED: " + firstLine(err.Error())
			} else {
				verdict = fmt.Sprintf("%d/%d replies, median %.0f µs", r.Received, r.Sent, float64(r.Median)/1e3)
			}
			fmt.Fprintf(w, "  pod %s %-11s -> pod %s %-11s %s\n", from.Host.Name, from.Addr, to.Host.Name, to.Addr, verdict)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				pingFailed = true
			}
		}
	}
	if pingFailed {
		l.Close()
		return fmt.Errorf("pod to pod ping failed on %s", bt)
	}
	return l.Close()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
