package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/factory"
	"github.com/weftnet/weft/firewall"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/lease/etcd"
	"github.com/weftnet/weft/lease/kube"
)

// Cleanup removes what weftd made on this host (`weftd cleanup`); it goes on past
// errors and returns them all.
func Cleanup(ctx context.Context, co CleanupConfig, log *zap.Logger) error {
	env, envErr := lease.ReadSubnetEnv(co.SubnetFile)
	if envErr != nil && !errors.Is(envErr, os.ErrNotExist) {
		log.Warn("subnet.env unreadable: overlay routes outside weft's devices are left alone", zap.Error(envErr))
	}
	var errs []error
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE) // routes and links only: no XFRM or netfilter socket
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer nl.Close()
	if co.Kube != nil {
		errs = append(errs, forgetNode(ctx, co, log))
	}
	if co.FirewallOnly {
		// flanneld takes over the devices and routes, but not the MTUs weft chose.
		if envErr == nil {
			for _, n := range []netip.Prefix{env.Network, env.IPv6Network} {
				if n.IsValid() {
					errs = append(errs, resetRouteMTUs(nl, n, log))
				}
			}
		}
		errs = append(errs, removeFirewall(ctx, log))
		return errors.Join(errs...)
	}
	if envErr == nil {
		for _, n := range []netip.Prefix{env.Network, env.IPv6Network} {
			if n.IsValid() {
				errs = append(errs, removeOverlayRoutes(nl, n, log))
			}
		}
		errs = append(errs, removeBlackholes(nl, env, log))
	}
	errs = append(errs, removeDevices(nl, cleanupDevices, log))
	errs = append(errs, removeFirewall(ctx, log))
	if (co.ReleaseLease || co.Uninstall) && co.Kube == nil {
		errs = append(errs, releaseLease(ctx, co, env, envErr, log))
	}
	files := []string{co.SubnetFile}
	if co.Uninstall {
		files = append(files, co.Files...)
		if co.LeaseStateFile != "" {
			files = append(files, co.LeaseStateFile)
		}
	}
	for _, f := range files {
		errs = append(errs, removeFile(f, log))
	}
	if co.Uninstall && co.LeaseStateFile != "" {
		// The state directory (systemd's StateDirectory, /var/lib/weft) goes once empty.
		dir := filepath.Dir(co.LeaseStateFile)
		if err := os.Remove(dir); err == nil {
			log.Info("removed", zap.String("dir", dir))
		}
	}
	return errors.Join(errs...)
}

// removeFile removes f; one that is not there is no error.
func removeFile(f string, log *zap.Logger) error {
	err := os.Remove(f)
	switch {
	case err == nil:
		log.Info("removed", zap.String("file", f))
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	return nil
}

// forgetNode removes weft's annotations and condition from our node (and with
// Uninstall the lease annotations).
func forgetNode(ctx context.Context, co CleanupConfig, log *zap.Logger) error {
	m, err := kube.New(*co.Kube, log)
	if err != nil {
		return err
	}
	defer m.Close()
	f, err := m.Forget(ctx, co.Uninstall, PeersConditionType)
	if err != nil {
		return err
	}
	log.Info("removed weft's marks from our node", zap.String("node", f.Node),
		zap.Strings("annotations", f.Annotations), zap.Strings("conditions", f.Conditions))
	return nil
}

// resetRouteMTUs writes the routes into network on weft's devices that carry an MTU
// (path repair's, which neither flanneld nor the kernel sets) again without it; a
// route of a subnet of its own on a device that routes the whole network
// (encap.Device.RoutesNetwork) is only there for its MTU and goes.
func resetRouteMTUs(nl *netlink.Handle, network netip.Prefix, log *zap.Logger) error {
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
		if r.MTU == 0 || !dst.IsValid() || !network.Contains(dst.Addr()) || dst.Bits() <= network.Bits() {
			continue
		}
		l, err := nl.LinkByIndex(r.LinkIndex)
		if err != nil {
			continue
		}
		dev, ok := weftDevice(l.Attrs().Name, l.Type())
		if !ok {
			continue
		}
		mtu, name := r.MTU, l.Attrs().Name
		if r.Gw == nil && dev.RoutesNetwork {
			err = nl.RouteDel(&r)
		} else {
			r.MTU = 0
			err = nl.RouteReplace(&r)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("route %v without mtu %d: %w", dst, mtu, err))
			continue
		}
		log.Info("reset route MTU", zap.Stringer("dst", dst), zap.String("dev", name), zap.Int("mtu", mtu))
	}
	return errors.Join(errs...)
}

// removeDevices deletes the devices of devs (cleanup: every backend's,
// cleanupDevices); the kernel takes their addresses, routes, neighbours and fdb
// entries with them.
func removeDevices(nl *netlink.Handle, devs []encap.Device, log *zap.Logger) error {
	links, err := nl.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	var errs []error
	for _, l := range links {
		name := l.Attrs().Name
		if !slices.ContainsFunc(devs, func(d encap.Device) bool { return d.Match(name, l.Type()) }) {
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

// cleanupDevices are the devices removeDevices deletes, as each backend's package
// lists its own (a name, "<VNI>" standing for a number, and the link types it
// deletes under that name). TestCleanupDevicesDocumented holds docs/operations.md to
// this list.
var cleanupDevices = factory.Devices()

// weftDevice finds the one of cleanupDevices a link of that name and type is.
func weftDevice(name, typ string) (encap.Device, bool) {
	for _, d := range cleanupDevices {
		if d.Match(name, typ) {
			return d, true
		}
	}
	return encap.Device{}, false
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
func releaseLease(ctx context.Context, co CleanupConfig, env lease.SubnetEnv, envErr error, log *zap.Logger) error {
	if envErr != nil && errors.Is(envErr, os.ErrNotExist) && co.Uninstall && !co.ReleaseLease {
		return nil // nothing names a lease: none to release
	}
	if envErr != nil {
		return fmt.Errorf("--release-lease: which lease is ours comes from %s: %w", co.SubnetFile, envErr)
	}
	reg, err := etcd.NewRegistry(co.Etcd, log)
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

// removeOtherDevices deletes the devices of the backends other than typ, which a
// weftd of another backend type left on this host when it stopped.
func removeOtherDevices(typ string, log *zap.Logger) error {
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer nl.Close()
	return removeDevices(nl, factory.OtherDevices(typ), log.With(zap.String("why", "another backend type's")))
}
