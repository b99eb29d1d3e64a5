package daemon

import (
	"context"
	"encoding/json"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/factory"
	"github.com/weftnet/weft/firewall"
	"github.com/weftnet/weft/lease"
)

// TestCleanupDualStack: on a host left by a dual-stack vxlan weftd (flannel.1 and
// flannel-v6.1, a route to a peer's IPv6 subnet via its address, masquerade rules in
// iptables and ip6tables), `weftd cleanup` removes all of it and leaves another
// tool's IPv6 route alone.
func TestCleanupDualStack(t *testing.T) {
	ns := netnstest.New(t, "weft-clean6")
	testenv.NeedTools(t, "ip6tables", "ip6tables-save", "iptables-save")
	ctx := context.Background()
	netnstest.Uplink(t, ns, "eth0", "192.0.2.10/24", "2001:db8::10/64")
	cfg := &lease.Config{EnableIPv4: true, Network: netip.MustParsePrefix("198.18.0.0/16"), SubnetLen: 24,
		EnableIPv6: true, IPv6Network: netip.MustParsePrefix("fd00::/48"), IPv6SubnetLen: 64,
		BackendType: "vxlan", Backend: json.RawMessage(`{"Type":"vxlan"}`)}
	own := lease.Lease{Subnet: netip.MustParsePrefix("198.18.11.0/24"), IPv6Subnet: netip.MustParsePrefix("fd00:0:0:11::/64")}
	env := lease.SubnetEnv{Network: cfg.Network, Subnet: own.Subnet, IPv6Network: cfg.IPv6Network, IPv6Subnet: own.IPv6Subnet, MTU: 1450, IPMasq: true}
	subnetFile := filepath.Join(t.TempDir(), "subnet.env")
	if err := lease.WriteSubnetEnv(subnetFile, env); err != nil {
		t.Fatal(err)
	}
	err := ns.Do(func() error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		ext := encap.ExternalInterface{Name: "eth0", Index: link.Attrs().Index, MTU: 1500,
			IfaceIP: netip.MustParseAddr("192.0.2.10"), PublicIP: netip.MustParseAddr("192.0.2.10"),
			IfaceIPv6: netip.MustParseAddr("2001:db8::10"), PublicIPv6: netip.MustParseAddr("2001:db8::10")}
		be, err := factory.New(cfg, ext, factory.Tuning{}, zaptest.NewLogger(t))
		if err != nil {
			return err
		}
		defer be.Close()
		if _, err := be.(encap.IPv6DataPublisher).BackendV6Data(ctx); err != nil {
			return err
		}
		if err := be.Register(ctx, own); err != nil {
			return err
		}
		fw, err := firewall.New(ctx, false, firewall.Options{Log: zaptest.NewLogger(t)})
		if err != nil {
			return err
		}
		if err := fw.SetMasq(ctx, cfg.Network, own.Subnet); err != nil {
			return err
		}
		return fw.SetMasq(ctx, cfg.IPv6Network, own.IPv6Subnet)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{"ip", "-6", "route", "add", "fd00:0:0:12::/64", "via", "2001:db8::11", "dev", "eth0"}, // host-gw's
		{"ip", "-6", "route", "add", "2001:db8:5::/64", "via", "2001:db8::11", "dev", "eth0"},  // not weft's
	} {
		if out, err := ns.Run(ctx, c[0], c[1:]...); err != nil {
			t.Fatalf("%v: %v: %s", c, err, out)
		}
	}
	before, _ := ns.Run(ctx, "sh", "-c", "ip -d link; ip -6 route; ip6tables-save")
	if !strings.Contains(before, "flannel-v6.1") || !strings.Contains(before, "WEFT-POSTRTG") {
		t.Fatalf("nothing to clean up:\n%s", before)
	}

	co := CleanupConfig{SubnetFile: subnetFile}
	if err := ns.Do(func() error { return Cleanup(ctx, co, zaptest.NewLogger(t)) }); err != nil {
		t.Fatal(err)
	}
	after, _ := ns.Run(ctx, "sh", "-c", "ip -d link; ip -6 route; ip6tables-save; iptables-save")
	for _, gone := range []string{"flannel-v6.1", "flannel.1", "fd00:0:0:12::/64", "WEFT"} {
		if strings.Contains(after, gone) {
			t.Errorf("%s left after cleanup:\n%s", gone, after)
		}
	}
	if !strings.Contains(after, "2001:db8:5::/64 via 2001:db8::11") {
		t.Errorf("cleanup removed another tool's IPv6 route:\n%s", after)
	}
}
