package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

// cleanupUsage introduces `weftd cleanup`.
const cleanupUsage = `usage: weftd cleanup [flags]

Removes what weftd made on this host, for a host leaving the overlay or after weftd was
killed: the devices flannel0 and flannel.<VNI> (and with them their addresses, routes,
fdb and neighbour entries), host-gw and DirectRouting routes to the overlay, weft's
firewall rules (iptables chains WEFT-POSTRTG and WEFT-FWD and the jumps to them, the
forward rules in FORWARD, nftables table ip weft) and subnet.env. The lease stays in
etcd for the next start unless --release-lease is given. Run it while weftd is stopped.
`

// cleanupOptions are cleanup's flags: weftd's own (for etcd and the subnet file,
// FLANNELD_* honoured) and --release-lease.
type cleanupOptions struct {
	*options
	releaseLease bool
}

// runCleanup is `weftd cleanup`.
func runCleanup(args []string, env func(string) string, stdout, stderr io.Writer) int {
	co := cleanupOptions{options: &options{}}
	fs := newFlagSet(co.options, stderr)
	fs.BoolVar(&co.releaseLease, "release-lease", false, "also delete our lease (named by subnet.env) from etcd")
	fs.Usage = func() { fmt.Fprint(stderr, cleanupUsage); fs.PrintDefaults() }
	if err := parseWith(fs, args, env); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "weftd cleanup: %v\n", err)
		return 2
	}
	log := newLogger(stderr, co.verbosity)
	defer log.Sync()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cleanup(ctx, co, log); err != nil {
		log.Error("cleanup incomplete", zap.Error(err))
		return 1
	}
	fmt.Fprintln(stdout, "weft's devices, routes, neighbours, fdb entries, firewall rules and subnet.env are removed")
	return 0
}

// parseWith parses args into fs, then fills each flag not given from FLANNELD_<FLAG>.
func parseWith(fs *flag.FlagSet, args []string, env func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := "FLANNELD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if given[f.Name] || err != nil || env(name) == "" {
			return
		}
		if serr := fs.Set(f.Name, env(name)); serr != nil {
			err = fmt.Errorf("environment %s: %w", name, serr)
		}
	})
	return err
}

// cleanup removes weft's state from this host; it goes on past errors and returns
// them all.
func cleanup(ctx context.Context, co cleanupOptions, log *zap.Logger) error {
	env, envErr := lease.ReadSubnetEnv(co.subnetFile)
	if envErr != nil && !errors.Is(envErr, os.ErrNotExist) {
		log.Warn("subnet.env unreadable: overlay routes outside weft's devices are left alone", zap.Error(envErr))
	}
	var errs []error
	nl, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer nl.Close()
	if envErr == nil {
		errs = append(errs, removeOverlayRoutes(nl, env.Network, log))
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

// removeDevices deletes flannel0 (udp) and every vxlan device flannel.<VNI>; the
// kernel takes their addresses, routes, neighbours and fdb entries with them.
func removeDevices(nl *netlink.Handle, log *zap.Logger) error {
	links, err := nl.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	var errs []error
	for _, l := range links {
		name := l.Attrs().Name
		ours := name == "flannel0" && l.Type() == "tuntap" ||
			strings.HasPrefix(name, "flannel.") && l.Type() == "vxlan"
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
// of network via a peer's address (host-gw, vxlan DirectRouting). Routes without a
// gateway (the CNI bridge's, the kernel's) are not weft's.
func removeOverlayRoutes(nl *netlink.Handle, network netip.Prefix, log *zap.Logger) error {
	routes, err := nl.RouteList(nil, netlink.FAMILY_V4)
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
	ip, ok := netip.AddrFromSlice(r.Dst.IP.To4())
	if !ok {
		return netip.Prefix{}
	}
	ones, _ := r.Dst.Mask.Size()
	return netip.PrefixFrom(ip, ones)
}

// releaseLease deletes our lease (the subnet in subnet.env) from etcd.
func releaseLease(ctx context.Context, co cleanupOptions, env lease.SubnetEnv, envErr error, log *zap.Logger) error {
	if envErr != nil {
		return fmt.Errorf("--release-lease: which lease is ours comes from %s: %w", co.subnetFile, envErr)
	}
	reg, err := lease.NewEtcdRegistry(lease.EtcdOptions{
		Endpoints: splitList(co.etcdEndpoints), Prefix: co.etcdPrefix,
		CertFile: co.etcdCertFile, KeyFile: co.etcdKeyFile, CAFile: co.etcdCAFile,
		Username: co.etcdUsername, Password: co.etcdPassword, API: co.etcdAPI,
	}, log)
	if err != nil {
		return fmt.Errorf("--release-lease: etcd: %w", err)
	}
	defer reg.Close()
	subnet := env.Subnet.Masked()
	if err := reg.Delete(ctx, subnet); err != nil && !errors.Is(err, lease.ErrNotFound) {
		return fmt.Errorf("--release-lease: delete %v: %w", subnet, err)
	}
	log.Info("released the lease", zap.Stringer("subnet", subnet))
	return nil
}

// Firewall removal. weft's rules, in every form a weftd version wrote them: the
// chains below with the jumps to them, rules commented "weft …" in the built-in
// chains, and the nftables table "ip weft". (When the firewall package lands, this is
// its Remove for both kinds.)
var weftChains = map[string][]string{"nat": {"WEFT-POSTRTG"}, "filter": {"WEFT-FWD"}}

func removeFirewall(ctx context.Context, log *zap.Logger) error {
	var errs []error
	if ipt, err := exec.LookPath("iptables"); err == nil {
		for _, table := range []string{"nat", "filter"} {
			errs = append(errs, removeIptables(ctx, ipt, table, log))
		}
	}
	if nft, err := exec.LookPath("nft"); err == nil {
		if exec.CommandContext(ctx, nft, "list", "table", "ip", "weft").Run() == nil {
			if out, err := exec.CommandContext(ctx, nft, "delete", "table", "ip", "weft").CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("nft delete table ip weft: %w: %s", err, strings.TrimSpace(string(out))))
			} else {
				log.Info("removed nftables table ip weft")
			}
		}
	}
	return errors.Join(errs...)
}

// removeIptables deletes, in one table, every rule of a built-in chain that jumps to
// a weft chain or carries a "weft" comment, then weft's chains.
func removeIptables(ctx context.Context, ipt, table string, log *zap.Logger) error {
	out, err := exec.CommandContext(ctx, ipt, "-w", "5", "-t", table, "-S").Output()
	if err != nil {
		return fmt.Errorf("iptables -t %s -S: %w", table, err)
	}
	ours := map[string]bool{}
	for _, c := range weftChains[table] {
		ours[c] = true
	}
	var errs []error
	present := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := splitRule(line)
		if len(f) >= 2 && f[0] == "-N" {
			present[f[1]] = true
		}
		if len(f) < 2 || f[0] != "-A" || ours[f[1]] || !isWeftRule(f, ours) {
			continue
		}
		del := append([]string{"-w", "5", "-t", table, "-D"}, f[1:]...)
		if out, err := exec.CommandContext(ctx, ipt, del...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("iptables %s: %w: %s", strings.Join(del, " "), err, strings.TrimSpace(string(out))))
			continue
		}
		log.Info("removed iptables rule", zap.String("table", table), zap.String("rule", line))
	}
	for _, c := range weftChains[table] {
		if !present[c] {
			continue
		}
		for _, op := range []string{"-F", "-X"} {
			if out, err := exec.CommandContext(ctx, ipt, "-w", "5", "-t", table, op, c).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("iptables -t %s %s %s: %w: %s", table, op, c, err, strings.TrimSpace(string(out))))
			}
		}
		log.Info("removed iptables chain", zap.String("table", table), zap.String("chain", c))
	}
	return errors.Join(errs...)
}

// isWeftRule reports whether an "-A chain …" rule is weft's: it jumps to one of our
// chains or its comment starts with "weft".
func isWeftRule(f []string, ours map[string]bool) bool {
	for i := 0; i+1 < len(f); i++ {
		switch f[i] {
		case "-j", "-g":
			if ours[f[i+1]] {
				return true
			}
		case "--comment":
			if strings.HasPrefix(f[i+1], "weft") {
				return true
			}
		}
	}
	return false
}

// splitRule splits a line of iptables -S into arguments, honouring double quotes.
func splitRule(line string) []string {
	var out []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' && inQuote && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			inQuote, have = !inQuote, true
		case c == ' ' && !inQuote:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}
