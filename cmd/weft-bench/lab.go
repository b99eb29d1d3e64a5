package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/netns"
)

func labState() string { return filepath.Join(stateDir(), "lab.json") }

func labCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: lab up|down|status", errUsage)
	}
	switch args[0] {
	case "up":
		return labUp(ctx, args[1:], stdout, stderr)
	case "hold":
		return labHold(ctx, args[1:], stderr)
	case "down":
		for _, f := range []string{labState(), filepath.Join(stateDir(), "run.json")} {
			if err := lab.Down(f); err != nil {
				return err
			}
		}
		fmt.Fprintln(stdout, "lab removed")
		return nil
	case "status":
		return labStatus(stdout)
	}
	return fmt.Errorf("%w: lab up|down|status, not %q", errUsage, args[0])
}

type labFlags struct {
	hosts, lan2 int
	backend     string
	weftd       string
	verbose     bool
}

func parseLabFlags(args []string, stderr io.Writer) (*labFlags, error) {
	o := &labFlags{}
	fs := flag.NewFlagSet("lab up", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.hosts, "hosts", 2, "hosts on LAN1 (192.0.2.0/24)")
	fs.IntVar(&o.lan2, "lan2", 1, "hosts on LAN2 (198.51.100.0/24), behind the router")
	fs.StringVar(&o.backend, "backend", "udp", "weftd backend on every host: udp, vxlan, host-gw, or none (topology only)")
	fs.StringVar(&o.weftd, "weftd", defaultWeftd(), "weftd binary")
	fs.BoolVar(&o.verbose, "v", false, "debug logging")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if o.hosts < 0 || o.lan2 < 0 || o.hosts+o.lan2 == 0 || o.hosts+o.lan2 > 20 {
		return nil, fmt.Errorf("%w: 1 to 20 hosts in all", errUsage)
	}
	switch o.backend {
	case "udp", "vxlan", "host-gw", "none":
	default:
		return nil, fmt.Errorf("%w: unknown backend %q", errUsage, o.backend)
	}
	return o, nil
}

func (o *labFlags) spec(state string) lab.Spec {
	var hs []lab.HostSpec
	for i := 0; i < o.hosts+o.lan2; i++ {
		h := lab.HostSpec{Name: string(rune('a' + i)), LAN: lab.LAN1}
		if i >= o.hosts {
			h.LAN = lab.LAN2
		}
		hs = append(hs, h)
	}
	return lab.Spec{Hosts: hs, StateFile: state}
}

// labUp starts `weft-bench lab hold` in the background (it owns the lab's processes
// and removes the lab on SIGTERM) and waits until it reports the lab ready.
func labUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseLabFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.backend != "none" {
		if err := needWeftd(o.weftd); err != nil {
			return err
		}
	}
	if s, err := lab.ReadState(labState()); err == nil && s.Keeper > 0 && syscall.Kill(s.Keeper, 0) == nil {
		return fmt.Errorf("a lab is already up (keeper pid %d): weft-bench lab down first", s.Keeper)
	}
	_ = lab.Down(labState()) // leftovers of a keeper that died
	if err := os.MkdirAll(stateDir(), 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(stateDir(), "lab.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, append([]string{"lab", "hold"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start lab keeper: %w", err)
	}
	w.Close()
	fmt.Fprintf(stderr, "building the lab (keeper pid %d, log %s)...\n", cmd.Process.Pid, logPath)
	msg, _ := io.ReadAll(r)
	r.Close()
	_ = cmd.Process.Release()
	if !strings.HasPrefix(string(msg), "ready") {
		_ = lab.Down(labState())
		data, _ := os.ReadFile(logPath)
		return fmt.Errorf("lab up failed: %s\n%s", strings.TrimSpace(string(msg)), tailLines(string(data), 15))
	}
	return labStatus(stdout)
}

func tailLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// labHold builds the lab, reports on fd 3, and keeps it until SIGINT/SIGTERM.
func labHold(ctx context.Context, args []string, stderr io.Writer) error {
	// fd 3 must not leak into etcd and weftd, which the lab starts: while any of them
	// held it, `lab up` would never see the pipe close.
	syscall.CloseOnExec(3)
	ready := os.NewFile(3, "ready")
	report := func(s string) {
		if ready != nil {
			fmt.Fprintln(ready, s)
			ready.Close()
			ready = nil
		}
	}
	defer report("failed")
	o, err := parseLabFlags(args, stderr)
	if err != nil {
		report(err.Error())
		return err
	}
	log := newLogger(stderr, o.verbose)
	l, err := lab.New(ctx, o.spec(labState()), log)
	if err != nil {
		report(err.Error())
		return err
	}
	defer l.Close()
	if o.backend != "none" {
		if _, _, err := startWeft(ctx, l, l.Hosts(), o.weftd, o.backend); err != nil {
			report(err.Error())
			return err
		}
	}
	report("ready")
	<-ctx.Done()
	return l.Close()
}

// labHealthzPort is the health port of the lab's weftd (deploy/weft.yml's), on each
// host's loopback: `weftd peers --healthz-port=8081` in a host's namespace asks it.
const labHealthzPort = 8081

// startWeft runs weftd with backend bt on hosts, its health server on the host's
// loopback, waits for every subnet.env and attaches one pod per host.
func startWeft(ctx context.Context, l *lab.Lab, hosts []*lab.Host, weftd, bt string) ([]*lab.Daemon, []*lab.Pod, error) {
	var ds []*lab.Daemon
	for _, h := range hosts {
		d, err := l.StartWeftd(ctx, h, weftd, bt, "--healthz-ip=127.0.0.1", fmt.Sprintf("--healthz-port=%d", labHealthzPort))
		if err != nil {
			return nil, nil, err
		}
		ds = append(ds, d)
	}
	var pods []*lab.Pod
	for _, d := range ds {
		env, err := d.WaitSubnetEnv(ctx, 20*time.Second)
		if err != nil {
			return nil, nil, err
		}
		p, err := l.AttachPod(ctx, d.Host, env)
		if err != nil {
			return nil, nil, err
		}
		pods = append(pods, p)
	}
	return ds, pods, nil
}

func labStatus(stdout io.Writer) error {
	s, err := lab.ReadState(labState())
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(stdout, "no lab is up (weft-bench lab up makes one)")
		return nil
	}
	if err != nil {
		return err
	}
	alive := s.Keeper > 0 && syscall.Kill(s.Keeper, 0) == nil
	fmt.Fprintf(stdout, "lab (keeper pid %d, %s), etcd %s in namespace %s\n", s.Keeper,
		map[bool]string{true: "running", false: "GONE: run weft-bench lab down"}[alive], s.Etcd, s.Router)
	for _, h := range s.Hosts {
		fmt.Fprintf(stdout, "  host %-3s %-14s netns %s", h.Name, h.Addr, h.NS)
		if !netns.Exists(h.NS) {
			fmt.Fprint(stdout, " (missing)")
		}
		fmt.Fprintln(stdout)
		if h.Subnet != "" {
			fmt.Fprintf(stdout, "           subnet %s, daemon log %s\n", h.Subnet, h.Log)
		}
		if h.PodNS != "" {
			fmt.Fprintf(stdout, "           pod %s in netns %s\n", h.PodAddr, h.PodNS)
		}
	}
	if len(s.Hosts) > 1 && s.Hosts[1].PodAddr != "" && s.Hosts[0].PodNS != "" {
		fmt.Fprintf(stdout, "\ntry:  ip netns exec %s ping -c3 %s\n", s.Hosts[0].PodNS, s.Hosts[1].PodAddr)
		fmt.Fprintf(stdout, "      ip netns exec %s ip route\n", s.Hosts[0].NS)
		if s.Hosts[0].Subnet != "" {
			fmt.Fprintf(stdout, "      ip netns exec %s bin/weftd peers --healthz-port=%d\n", s.Hosts[0].NS, labHealthzPort)
		}
	}
	fmt.Fprintln(stdout, "remove with: weft-bench lab down")
	return nil
}
