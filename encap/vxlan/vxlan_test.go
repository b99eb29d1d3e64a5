package vxlan

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// TestVXLANOptions reads vxlan Backend objects as flanneld v0.28.10 does: MTU is the
// underlay's (default the interface's) and the device gets 50 less; GBP, Learning and
// MacPrefix are accepted.
func TestVXLANOptions(t *testing.T) {
	for _, c := range []struct {
		raw                 string
		devMTU, vni, port   int
		gbp, learning, dirR bool
		errName             string
	}{
		{raw: `{"Type":"vxlan"}`, devMTU: 1450, vni: 1, port: 8472},
		{raw: `{"type":"vxlan","vni":2}`, devMTU: 1450, vni: 2, port: 8472},
		{raw: `{"Type":"vxlan","MTU":1450}`, devMTU: 1400, vni: 1, port: 8472},
		{raw: `{"type":"vxlan","mtu":9000}`, devMTU: 8950, vni: 1, port: 8472},
		{raw: `{"Type":"vxlan","MTU":118}`, devMTU: 68, vni: 1, port: 8472},
		{raw: `{"Type":"vxlan","GBP":true,"Learning":true}`, devMTU: 1450, vni: 1, port: 8472, gbp: true, learning: true},
		{raw: `{"type":"vxlan","gbp":true,"directRouting":true,"port":4789}`, devMTU: 1450, vni: 1, port: 4789, gbp: true, dirR: true},
		{raw: `{"Type":"vxlan","MacPrefix":"0E-2A"}`, devMTU: 1450, vni: 1, port: 8472},
		{raw: `{"Type":"vxlan","MTU":117}`, errName: "MTU"},
		{raw: `{"Type":"vxlan","MTU":-1}`, errName: "MTU"},
		{raw: `{"Type":"vxlan","GBP":"yes"}`, errName: "GBP"},
		{raw: `{"Type":"vxlan","Learning":1}`, errName: "Learning"},
		{raw: `{"Type":"vxlan","MacPrefix":1}`, errName: "MacPrefix"},
		{raw: `{"Type":"vxlan","VNI":16777216}`, errName: "VNI"},
		{raw: `{"Type":"vxlan","Port":70000}`, errName: "Port"},
		{raw: `{"Type":"vxlan","Nope":1}`, errName: `"Nope"`},
	} {
		t.Run(c.raw, func(t *testing.T) {
			cfg := testConfig(c.raw)
			cfg.BackendType = "vxlan"
			be, err := New(cfg, encap.ExternalInterface{MTU: 1500}, zap.NewNop())
			if c.errName != "" {
				if !errors.Is(err, encap.ErrBadOption) || !strings.Contains(err.Error(), c.errName) {
					t.Fatalf("error %v, want encap.ErrBadOption naming %s", err, c.errName)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			v := be.(*backend)
			if be.MTU() != c.devMTU || v.opts.VNI != c.vni || v.opts.Port != c.port || v.opts.GBP != c.gbp ||
				v.opts.Learning != c.learning || v.opts.DirectRouting != c.dirR {
				t.Fatalf("MTU %d, options %+v; want MTU %d VNI %d port %d GBP %v Learning %v DirectRouting %v",
					be.MTU(), v.opts, c.devMTU, c.vni, c.port, c.gbp, c.learning, c.dirR)
			}
		})
	}
}

// uplinkNS makes a namespace whose eth0 (a netnstest.Uplink) has 192.0.2.10/24.
func uplinkNS(t testing.TB, name string) *netns.NS {
	t.Helper()
	ns := netnstest.New(t, name)
	netnstest.Uplink(t, ns, "eth0", "192.0.2.10/24")
	return ns
}

// TestVXLANDevice makes flannel.<VNI> in a namespace: its MTU, VNI, port, GBP and
// Learning follow the options and BackendData carries VNI and VtepMAC as flanneld's.
func TestVXLANDevice(t *testing.T) {
	ns := uplinkNS(t, "weft-vxlan")
	ctx := context.Background()
	for _, c := range []struct {
		raw           string
		name          string
		mtu, vni      int
		gbp, learning bool
	}{
		{raw: `{"Type":"vxlan","MTU":1450}`, name: "flannel.1", mtu: 1400, vni: 1},
		{raw: `{"type":"vxlan","vni":7,"gbp":true,"learning":true}`, name: "flannel.7", mtu: 1450, vni: 7, gbp: true, learning: true},
	} {
		t.Run(c.raw, func(t *testing.T) {
			err := ns.Do(func() error {
				link, err := netlink.LinkByName("eth0")
				if err != nil {
					return err
				}
				cfg := testConfig(c.raw)
				cfg.BackendType = "vxlan"
				ext := encap.ExternalInterface{Name: "eth0", Index: link.Attrs().Index, MTU: 1500,
					IfaceIP: netip.MustParseAddr("192.0.2.10"), PublicIP: netip.MustParseAddr("192.0.2.10")}
				be, err := New(cfg, ext, zaptest.NewLogger(t))
				if err != nil {
					return err
				}
				defer be.Close()
				data, err := be.BackendData(ctx)
				if err != nil {
					return err
				}
				defer func() {
					if l, err := netlink.LinkByName(c.name); err == nil {
						_ = netlink.LinkDel(l)
					}
				}()
				if err := be.Register(ctx, lease.Lease{Subnet: netip.MustParsePrefix("198.18.3.0/24"),
					Attrs: lease.Attrs{PublicIP: ext.PublicIP, BackendType: "vxlan", BackendData: data}}); err != nil {
					return err
				}
				l, err := netlink.LinkByName(c.name)
				if err != nil {
					return err
				}
				x := l.(*netlink.Vxlan)
				if x.MTU != c.mtu || x.VxlanId != c.vni || x.Port != 8472 || x.GBP != c.gbp || x.Learning != c.learning {
					t.Errorf("device MTU %d VNI %d port %d GBP %v learning %v; want %d %d 8472 %v %v",
						x.MTU, x.VxlanId, x.Port, x.GBP, x.Learning, c.mtu, c.vni, c.gbp, c.learning)
				}
				var got map[string]any
				if err := json.Unmarshal(data, &got); err != nil {
					return err
				}
				if len(got) != 2 || got["VNI"] != float64(c.vni) || got["VtepMAC"] != x.HardwareAddr.String() {
					t.Errorf("BackendData %s, want VNI %d and VtepMAC %s only", data, c.vni, x.HardwareAddr)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func testConfig(backend string) *lease.Config {
	return &lease.Config{Network: netip.MustParsePrefix("198.18.0.0/16"), SubnetLen: 24,
		BackendType: "vxlan", Backend: json.RawMessage(backend)}
}

// TestVXLANNeedsIPv6Address: vxlan on a network with EnableIPv6 refuses an external
// interface without an IPv6 address, with a clear error.
func TestVXLANNeedsIPv6Address(t *testing.T) {
	cfg := &lease.Config{EnableIPv4: true, Network: netip.MustParsePrefix("198.18.0.0/16"), SubnetLen: 24,
		EnableIPv6: true, IPv6Network: netip.MustParsePrefix("fd00::/48"), IPv6SubnetLen: 64, BackendType: "vxlan"}
	_, err := New(cfg, encap.ExternalInterface{Name: "eth0", MTU: 1500, IfaceIP: netip.MustParseAddr("192.0.2.10")}, zap.NewNop())
	if !errors.Is(err, ErrNoIPv6Address) || !strings.Contains(err.Error(), "eth0") {
		t.Fatalf("error %v, want ErrNoIPv6Address naming eth0", err)
	}
}
