package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/daemon"
)

// cleanupUsage introduces `weftd cleanup`.
const cleanupUsage = `usage: weftd cleanup [flags]

Removes what weftd made on this host, for a host leaving the overlay or after weftd was
killed: the devices flannel0, flannel.<VNI>, flannel-v6.<VNI>, flannel-wg and
flannel-wg-v6 (and with them their addresses, routes, fdb and neighbour entries),
host-gw and DirectRouting routes to the overlay (IPv4 and IPv6), the blackhole routes for our subnets (--ip-blackhole-route),
weft's firewall rules (iptables and ip6tables chains
WEFT-POSTRTG and WEFT-FWD and the jumps to them, the forward rules in FORWARD, nftables
tables ip weft and ip6 weft) and subnet.env. The lease stays in
etcd for the next start unless --release-lease is given. Run it while weftd is stopped.

With --firewall-only it removes weft's firewall rules and nothing else, for a node going
back to flanneld: flanneld adopts the devices, routes and subnet.env weftd left, so
running pods keep their addresses and their traffic, but it never removes weft's rules.
--wait then keeps the command running until SIGTERM or SIGINT, so that a DaemonSet pod
can run it.
`

// cleanupOptions are cleanup's flags: weftd's own (for etcd and the subnet file,
// FLANNELD_* honoured), --release-lease, --firewall-only and --wait.
type cleanupOptions struct {
	*options
	releaseLease bool
	firewallOnly bool // remove weft's firewall rules only, for a node going back to flanneld
	wait         bool // after cleaning up, wait for SIGTERM or SIGINT (a DaemonSet's pod)
}

// runCleanup is `weftd cleanup`.
func runCleanup(args []string, env func(string) string, stdout, stderr io.Writer) int {
	co := cleanupOptions{options: &options{}}
	fs := newFlagSet(co.options, stderr)
	fs.BoolVar(&co.releaseLease, "release-lease", false, "also delete our lease (named by subnet.env) from etcd")
	fs.BoolVar(&co.firewallOnly, "firewall-only", false, "remove weft's firewall rules only, leaving devices, routes and subnet.env to flanneld")
	fs.BoolVar(&co.wait, "wait", false, "after cleaning up, wait for SIGTERM or SIGINT before exiting")
	fs.Usage = func() { fmt.Fprint(stderr, cleanupUsage); fs.PrintDefaults() }
	err := parseWith(fs, args, env)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && co.firewallOnly && co.releaseLease {
		err = errors.New("--release-lease and --firewall-only: the lease names the subnet the node keeps")
	}
	if err != nil {
		fmt.Fprintf(stderr, "weftd cleanup: %v\n", err)
		return 2
	}
	// Caught from the start, so that a signal during the cleanup does not cut it short.
	sig, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := newLogger(stderr, co.verbosity)
	defer log.Sync()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := daemon.CleanupConfig{SubnetFile: co.subnetFile, ReleaseLease: co.releaseLease, Etcd: co.etcdOptions(),
		FirewallOnly: co.firewallOnly}
	if err := daemon.Cleanup(ctx, cfg, log); err != nil {
		log.Error("cleanup incomplete", zap.Error(err))
		return 1
	}
	if co.firewallOnly {
		fmt.Fprintln(stdout, "weft's firewall rules are removed; devices, routes and subnet.env are left to flanneld")
	} else {
		fmt.Fprintln(stdout, "weft's devices, routes, neighbours, fdb entries, firewall rules and subnet.env are removed")
	}
	if co.wait {
		<-sig.Done()
	}
	return 0
}
