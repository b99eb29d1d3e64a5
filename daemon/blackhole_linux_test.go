package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
)

// blackholeHost is a namespace with a default route out of eth0 and a pod's host
// route (as Canal gives pods) inside 198.18.11.0/24 and fd00:0:0:11::/64 out of pod0,
// the stand-in for the pod's veth.
func blackholeHost(t *testing.T) *netns.NS {
	ns := netnstest.New(t, "weft-bh")
	netnstest.Uplink(t, ns, "eth0", "192.0.2.10/24", "2001:db8::10/64")
	netnstest.Uplink(t, ns, "pod0")
	for _, c := range [][]string{
		{"ip", "route", "add", "default", "via", "192.0.2.1"},
		{"ip", "-6", "route", "add", "default", "via", "2001:db8::1"},
		{"ip", "route", "add", "198.18.11.5/32", "dev", "pod0"},
		{"ip", "-6", "route", "add", "fd00:0:0:11::5/128", "dev", "pod0"},
	} {
		if out, err := ns.Run(context.Background(), c[0], c[1:]...); err != nil {
			t.Fatalf("%v: %v: %s", c, err, out)
		}
	}
	return ns
}

// routeGet is `ip route get addr` in ns.
func routeGet(t *testing.T, ns *netns.NS, addr string) string {
	t.Helper()
	out, err := ns.Run(context.Background(), "ip", "route", "get", addr)
	if err != nil && !strings.Contains(out, "No route to host") && !strings.Contains(out, "Invalid argument") {
		t.Fatalf("ip route get %s: %v: %s", addr, err, out)
	}
	return out
}

// dropped tells whether the kernel drops what is sent to addr (a blackhole route:
// `ip route get` fails for IPv4, names a blackhole for IPv6), as against routing it.
func dropped(t *testing.T, ns *netns.NS, addr string) bool {
	out := routeGet(t, ns, addr)
	return strings.Contains(out, "blackhole") || strings.Contains(out, "No route to host") || strings.Contains(out, "Invalid argument")
}

// TestBlackholeRoute (--ip-blackhole-route): in a namespace, a free address of our
// subnet leaves by the default route until weftd's blackhole route is there, and is
// dropped after; a pod's host route still wins. The route is written once however
// often it is ensured, is put back by the resync when removed, follows a change of
// lease, and `weftd cleanup` removes it and no other route.
func TestBlackholeRoute(t *testing.T) {
	ns := blackholeHost(t)
	testenv.NeedTools(t, "ip")
	own := lease.Lease{Subnet: netip.MustParsePrefix("198.18.11.0/24"), IPv6Subnet: netip.MustParsePrefix("fd00:0:0:11::/64")}
	next := lease.Lease{Subnet: netip.MustParsePrefix("198.18.12.0/24"), IPv6Subnet: netip.MustParsePrefix("fd00:0:0:11::/64")}
	free := []string{"198.18.11.77", "fd00:0:0:11::77"}
	pods := []string{"198.18.11.5", "fd00:0:0:11::5"}
	for _, a := range free {
		if dropped(t, ns, a) {
			t.Fatalf("%s dropped before any blackhole route: %s", a, routeGet(t, ns, a))
		}
	}

	core, logs := observer.New(zapcore.DebugLevel)
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{cfg: &Config{BlackholeRoute: true, Resync: time.Second}, log: zap.New(core)}
	d.held.Store(&own)
	if err := ns.Do(func() error { return d.startBlackholes(ctx, own) }); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			cancel()
			d.wg.Wait()
			stopped = true
		}
	}
	t.Cleanup(stop)
	for _, a := range free {
		if !dropped(t, ns, a) {
			t.Errorf("%s not dropped with the blackhole route: %s", a, routeGet(t, ns, a))
		}
	}
	for _, a := range pods {
		if out := routeGet(t, ns, a); !strings.Contains(out, "dev pod0") {
			t.Errorf("pod %s not routed to its device: %s", a, out)
		}
	}
	countRoutes := func(p string) int {
		out, err := ns.Run(context.Background(), "ip", "route", "show", "table", "all", "type", "blackhole")
		if err != nil {
			t.Fatalf("ip route show: %v: %s", err, out)
		}
		return strings.Count(out, p+" ") + strings.Count(out, p+"\n")
	}
	d.moveBlackholes(own, own) // ensure again: nothing to add
	if n := countRoutes("198.18.11.0/24"); n != 1 {
		t.Errorf("%d blackhole routes for 198.18.11.0/24, want 1", n)
	}

	// Removed by someone: back within a resync (1 s).
	if out, err := ns.Run(context.Background(), "ip", "route", "del", "blackhole", "198.18.11.0/24"); err != nil {
		t.Fatalf("ip route del: %v: %s", err, out)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if !dropped(t, ns, free[0]) {
			return fmt.Errorf("%s not dropped again after the resync", free[0])
		}
		return nil
	})

	// A new lease: the old IPv4 subnet's route goes, the new one's comes; the
	// unchanged IPv6 subnet keeps its route.
	d.held.Store(&next)
	d.moveBlackholes(own, next)
	if dropped(t, ns, free[0]) || !dropped(t, ns, "198.18.12.9") || !dropped(t, ns, free[1]) {
		t.Errorf("after the lease change: 198.18.11.77: %s198.18.12.9: %s%s: %s",
			routeGet(t, ns, free[0]), routeGet(t, ns, "198.18.12.9"), free[1], routeGet(t, ns, free[1]))
	}
	stop()
	if logs.FilterLevelExact(zapcore.WarnLevel).Len() > 0 {
		t.Errorf("warnings: %v", logs.FilterLevelExact(zapcore.WarnLevel).All())
	}

	// weftd cleanup: subnet.env names the subnets; another tool's blackhole route
	// (198.18.99.0/24) and the pods' routes stay.
	if out, err := ns.Run(context.Background(), "ip", "route", "add", "blackhole", "198.18.99.0/24"); err != nil {
		t.Fatalf("ip route add: %v: %s", err, out)
	}
	subnetFile := filepath.Join(t.TempDir(), "subnet.env")
	env := lease.SubnetEnv{Network: netip.MustParsePrefix("198.18.0.0/16"), Subnet: netip.MustParsePrefix("198.18.12.1/24"),
		IPv6Network: netip.MustParsePrefix("fd00::/48"), IPv6Subnet: netip.MustParsePrefix("fd00:0:0:11::1/64"), MTU: 1450}
	if err := lease.WriteSubnetEnv(subnetFile, env); err != nil {
		t.Fatal(err)
	}
	co := CleanupConfig{SubnetFile: subnetFile}
	if err := ns.Do(func() error { return Cleanup(context.Background(), co, zap.NewNop()) }); err != nil {
		t.Logf("cleanup: %v (firewall tools may be missing here)", err)
	}
	for _, a := range []string{"198.18.12.9", free[1]} {
		if dropped(t, ns, a) {
			t.Errorf("%s still dropped after cleanup: %s", a, routeGet(t, ns, a))
		}
	}
	if !dropped(t, ns, "198.18.99.1") {
		t.Errorf("cleanup removed another tool's blackhole route")
	}
	for _, a := range pods {
		if out := routeGet(t, ns, a); !strings.Contains(out, "dev pod0") {
			t.Errorf("pod %s lost its route: %s", a, out)
		}
	}
}

// TestBlackholeRouteConflict: where the CNI bridge already routes the subnet (cni0's
// prefix route, the same destination and metric), the blackhole route cannot be
// added, as with flanneld: weftd warns once, not at every resync, and the bridge's
// route stays.
func TestBlackholeRouteConflict(t *testing.T) {
	ns := blackholeHost(t)
	for _, c := range [][]string{
		{"ip", "link", "add", "cni0", "type", "bridge"},
		{"ip", "addr", "add", "198.18.11.1/24", "dev", "cni0"},
		{"ip", "link", "set", "cni0", "up"},
	} {
		if out, err := ns.Run(context.Background(), c[0], c[1:]...); err != nil {
			t.Fatalf("%v: %v: %s", c, err, out)
		}
	}
	core, logs := observer.New(zapcore.DebugLevel)
	own := lease.Lease{Subnet: netip.MustParsePrefix("198.18.11.0/24")}
	err := ns.Do(func() error {
		nl, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer nl.Close()
		b := &blackholer{nl: nl, log: zap.New(core), failed: map[netip.Prefix]string{}}
		for range 3 {
			b.ensure(own)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 1 {
		t.Errorf("%d warnings, want 1: %v", n, logs.All())
	}
	if out := routeGet(t, ns, "198.18.11.77"); !strings.Contains(out, "dev cni0") {
		t.Errorf("198.18.11.77 not on cni0: %s", out)
	}
}
