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
tables ip weft and ip6 weft) and subnet.env. With --kube-subnet-mgr (the node named as
weftd finds it: --node-name, NODE_NAME or POD_NAMESPACE/POD_NAME) it also removes
weft's annotations (weft.weftnet.io/*) and the WeftPeersReachable condition from the
node. The lease stays in etcd for the next start unless --release-lease is given. Run it
while weftd is stopped.

With --firewall-only it hands the node to flanneld: it removes weft's firewall rules,
the route MTUs path repair set, and (with --kube-subnet-mgr) weft's annotations and
condition; flanneld adopts the devices, routes and subnet.env weftd left, so running
pods keep their addresses and their traffic.

With --uninstall nothing of weft stays: besides the above, the lease (in etcd; in
Kubernetes mode the node's flannel annotations), the --lease-state-file (and its
directory once empty) and the files --remove-files names (the CNI config and plugin a
DaemonSet installed).

--wait then keeps the command running until SIGTERM or SIGINT, so that a DaemonSet pod
can run it.
`

// cleanupOptions are cleanup's flags: weftd's own (for etcd, Kubernetes and the
// files, FLANNELD_* honoured), --release-lease, --firewall-only, --uninstall,
// --remove-files and --wait.
type cleanupOptions struct {
	*options
	releaseLease bool
	firewallOnly bool // hand the node back to flanneld
	uninstall    bool // remove the lease, the state file and --remove-files too
	removeFiles  string
	wait         bool // after cleaning up, wait for SIGTERM or SIGINT (a DaemonSet's pod)
}

// runCleanup is `weftd cleanup`.
func runCleanup(args []string, env func(string) string, stdout, stderr io.Writer) int {
	co := cleanupOptions{options: &options{}}
	fs := newFlagSet(co.options, stderr)
	fs.BoolVar(&co.releaseLease, "release-lease", false, "also delete our lease (named by subnet.env) from etcd")
	fs.BoolVar(&co.firewallOnly, "firewall-only", false, "hand the node to flanneld: remove weft's firewall rules, route MTUs and node marks only, leaving devices, routes and subnet.env")
	fs.BoolVar(&co.uninstall, "uninstall", false, "remove everything of weft: also the lease, --lease-state-file and --remove-files")
	fs.StringVar(&co.removeFiles, "remove-files", "", "with --uninstall, also remove these files (comma-separated: the CNI config and plugin a DaemonSet installed)")
	fs.BoolVar(&co.wait, "wait", false, "after cleaning up, wait for SIGTERM or SIGINT before exiting")
	fs.Usage = func() { fmt.Fprint(stderr, cleanupUsage); fs.PrintDefaults() }
	err := parseWith(fs, args, env)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && co.nodeName == "" {
		co.nodeName = env("NODE_NAME")
	}
	co.podName, co.podNamespace = env("POD_NAME"), env("POD_NAMESPACE")
	switch {
	case err != nil:
	case co.firewallOnly && (co.releaseLease || co.uninstall):
		err = errors.New("--firewall-only with --release-lease or --uninstall: the node keeps its subnet for flanneld")
	case co.removeFiles != "" && !co.uninstall:
		err = errors.New("--remove-files needs --uninstall")
	case co.kubeSubnetMgr && co.nodeName == "" && (co.podName == "" || co.podNamespace == ""):
		err = errors.New("--kube-subnet-mgr needs the node: --node-name, NODE_NAME, or POD_NAMESPACE and POD_NAME")
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
		FirewallOnly: co.firewallOnly, Kube: co.config(buildInfo{}).Kube, Uninstall: co.uninstall,
		LeaseStateFile: co.leaseStateFile, Files: splitList(co.removeFiles)}
	if err := daemon.Cleanup(ctx, cfg, log); err != nil {
		log.Error("cleanup incomplete", zap.Error(err))
		return 1
	}
	node := ""
	if co.kubeSubnetMgr {
		node = "; weft's node annotations and condition are removed"
	}
	switch {
	case co.firewallOnly:
		fmt.Fprintf(stdout, "weft's firewall rules and route MTUs are removed%s; devices, routes and subnet.env are left to flanneld\n", node)
	case co.uninstall:
		fmt.Fprintf(stdout, "weft is uninstalled from this host: devices, routes, firewall rules, subnet.env, the lease and the lease state are removed%s\n", node)
	default:
		fmt.Fprintf(stdout, "weft's devices, routes, neighbours, fdb entries, firewall rules and subnet.env are removed%s\n", node)
	}
	if co.wait {
		<-sig.Done()
	}
	return 0
}
