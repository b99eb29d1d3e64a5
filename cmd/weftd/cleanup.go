package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/encap/factory"
	"github.com/weftnet/weft/firewall"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/lease/etcd"
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
	if err := cleanup(ctx, co, log); err != nil {
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

// parseWith parses args into fs, then fills each flag not given on the command line
// from its FLANNELD_ variable (envName), as flanneld does.
func parseWith(fs *flag.FlagSet, args []string, env func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		v := env(name)
		if given[f.Name] || !fromEnv(f.Name) || v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("environment %s=%q: %w", name, v, err))
		}
	})
	return errors.Join(errs...)
}

// cleanup removes weft's state from this host; it goes on past errors and returns
// them all.
func cleanup(ctx context.Context, co cleanupOptions, log *zap.Logger) error {
	if co.firewallOnly {
		return removeFirewall(ctx, log)
	}
	env, envErr := lease.ReadSubnetEnv(co.subnetFile)
	if envErr != nil && !errors.Is(envErr, os.ErrNotExist) {
		log.Warn("subnet.env unreadable: overlay routes outside weft's devices are left alone", zap.Error(envErr))
	}
	var errs []error
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE) // routes and links only: no XFRM or netfilter socket
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer nl.Close()
	if envErr == nil {
		for _, n := range []netip.Prefix{env.Network, env.IPv6Network} {
			if n.IsValid() {
				errs = append(errs, removeOverlayRoutes(nl, n, log))
			}
		}
		errs = append(errs, removeBlackholes(nl, env, log))
	}
	errs = append(errs, removeDevices(nl, log))
	errs = append(errs, removeFirewall(ctx, log))
	if co.releaseLease {
		errs = append(errs, releaseLease(ctx, co, env, envErr, log))
	}
	if err := os.Remove(co.subnetFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	} else if err == nil {
		log.Info("removed", zap.String("file", co.subnetFile))
	}
	return errors.Join(errs...)
}

// removeDevices deletes flannel0 (udp), every vxlan device flannel.<VNI> and
// flannel-v6.<VNI> (flanneld's name for the IPv6 one), and the wireguard backend's
// flannel-wg and flannel-wg-v6 (kernel devices, or a TUN a running weftd holds); the kernel takes their
// addresses, routes, neighbours and fdb entries with them.
func removeDevices(nl *netlink.Handle, log *zap.Logger) error {
	links, err := nl.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	var errs []error
	for _, l := range links {
		name := l.Attrs().Name
		ours := name == "flannel0" && l.Type() == "tuntap" ||
			(strings.HasPrefix(name, "flannel.") || strings.HasPrefix(name, "flannel-v6.")) && l.Type() == "vxlan" ||
			(name == factory.WireGuardDevice || name == factory.WireGuardDeviceV6) && (l.Type() == "wireguard" || l.Type() == "tuntap")
		if !ours {
			continue
		}
		if err := nl.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", name, err))
			continue
		}
		log.Info("removed device", zap.String("dev", name), zap.String("type", l.Type()))
	}
	return errors.Join(errs...)
}

// removeOverlayRoutes deletes the routes weft adds outside its own devices: a subnet
// of network (IPv4 or IPv6) via a peer's address (host-gw, vxlan DirectRouting).
// Routes without a gateway (the CNI bridge's, the kernel's) are not weft's.
func removeOverlayRoutes(nl *netlink.Handle, network netip.Prefix, log *zap.Logger) error {
	fam := netlink.FAMILY_V4
	if network.Addr().Is6() {
		fam = netlink.FAMILY_V6
	}
	routes, err := nl.RouteList(nil, fam)
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	var errs []error
	for _, r := range routes {
		dst := routeKey(r)
		if !dst.IsValid() || r.Gw == nil || !network.Contains(dst.Addr()) || dst.Bits() < network.Bits() {
			continue
		}
		if err := nl.RouteDel(&r); err != nil {
			errs = append(errs, fmt.Errorf("delete route %v: %w", dst, err))
			continue
		}
		log.Info("removed route", zap.Stringer("dst", dst), zap.Stringer("via", r.Gw))
	}
	return errors.Join(errs...)
}

func routeKey(r netlink.Route) netip.Prefix {
	if r.Dst == nil {
		return netip.Prefix{}
	}
	ip, ok := netip.AddrFromSlice(r.Dst.IP)
	if !ok {
		return netip.Prefix{}
	}
	ones, _ := r.Dst.Mask.Size()
	return netip.PrefixFrom(ip.Unmap(), ones)
}

// releaseLease deletes our lease (named by the subnets in subnet.env: IPv4, IPv6 or
// both) from etcd.
func releaseLease(ctx context.Context, co cleanupOptions, env lease.SubnetEnv, envErr error, log *zap.Logger) error {
	if envErr != nil {
		return fmt.Errorf("--release-lease: which lease is ours comes from %s: %w", co.subnetFile, envErr)
	}
	reg, err := etcd.NewRegistry(etcd.Options{
		Endpoints: splitList(co.etcdEndpoints), Prefix: co.etcdPrefix,
		CertFile: co.etcdCertFile, KeyFile: co.etcdKeyFile, CAFile: co.etcdCAFile,
		Username: co.etcdUsername, Password: co.etcdPassword, API: co.etcdAPI,
	}, log)
	if err != nil {
		return fmt.Errorf("--release-lease: etcd: %w", err)
	}
	defer reg.Close()
	k := lease.Key{Subnet: env.Subnet.Masked(), IPv6Subnet: env.IPv6Subnet.Masked()}
	if err := reg.Delete(ctx, k); err != nil && !errors.Is(err, etcd.ErrNotFound) {
		return fmt.Errorf("--release-lease: delete %v: %w", k, err)
	}
	log.Info("released the lease", zap.Stringer("lease", k))
	return nil
}

// removeFirewall deletes weft's rules of both kinds (iptables chains with their jumps,
// the nftables table), whichever tools this host has.
func removeFirewall(ctx context.Context, log *zap.Logger) error {
	return firewall.RemoveAll(ctx, firewall.Options{Log: log})
}
