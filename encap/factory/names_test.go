package factory

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// TestNamesAreTheBackends: Repairers are exactly the backends with a repair loop
// (encap.RepairKindLister), ErrSiteBackend names exactly the one that publishes
// sites (encap.SitePublisher), and every backend with metrics of its own describes
// them here (DescribeMetrics).
func TestNamesAreTheBackends(t *testing.T) {
	ext := encap.ExternalInterface{Name: "eth0", MTU: 1500, IfaceIP: netip.MustParseAddr("192.0.2.10")}
	described := map[string]bool{}
	ch := make(chan *prometheus.Desc, 64)
	DescribeMetrics(ch)
	close(ch)
	for d := range ch {
		described[d.String()] = true
	}
	var repairers, sites []string
	for _, typ := range []string{"udp", "vxlan", "host-gw", "wireguard", "alloc", "extension"} {
		more := ""
		if typ == "extension" {
			more = `,"SubnetAddCommand":"true"`
		}
		cfg, err := lease.ParseConfig([]byte(`{"Network":"198.18.0.0/16","Backend":{"Type":"` + typ + `"` + more + `}}`))
		if err != nil {
			t.Fatal(err)
		}
		tuning := Tuning{}
		tuning.WireGuard.KeyFile = filepath.Join(t.TempDir(), "wgkey")
		be, err := New(cfg, ext, tuning, zap.NewNop())
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if _, ok := be.(encap.RepairKindLister); ok {
			repairers = append(repairers, be.Type())
		}
		if _, ok := be.(encap.SitePublisher); ok {
			sites = append(sites, be.Type())
		}
		if rp, ok := be.(encap.Reporter); ok {
			if m := rp.Report().Metrics; m != nil {
				ch := make(chan *prometheus.Desc, 64)
				go func() { m.Describe(ch); close(ch) }()
				for d := range ch {
					if !described[d.String()] {
						t.Errorf("%s's metric %s is not in DescribeMetrics", typ, d)
					}
				}
			}
		}
		be.Close()
	}
	if !slices.Equal(repairers, Repairers) {
		t.Errorf("backends with a repair loop: %q; Repairers: %q", repairers, Repairers)
	}
	if len(sites) != 1 || !strings.Contains(ErrSiteBackend.Error(), " "+sites[0]+" ") {
		t.Errorf("backends that publish sites: %q; ErrSiteBackend says %q", sites, ErrSiteBackend)
	}
}

// TestOtherDevices: a weftd starting with one backend type removes the devices of the
// others, never its own (a udp host's flannel0, a wireguard host's flannel-wg).
func TestOtherDevices(t *testing.T) {
	for _, c := range []struct {
		typ        string
		keep, drop []string // a device name and its link type, "name/type"
	}{
		{"udp", []string{"flannel0/tuntap"}, []string{"flannel.1/vxlan", "flannel-wg/wireguard", "flannel-wg/tuntap"}},
		{"", []string{"flannel0/tuntap"}, []string{"flannel.1/vxlan", "flannel-wg/tuntap"}},
		{"VXLAN", []string{"flannel.1/vxlan", "flannel-v6.4096/vxlan"}, []string{"flannel0/tuntap", "flannel-wg-v6/tuntap"}},
		{"wireguard", []string{"flannel-wg/wireguard", "flannel-wg/tuntap", "flannel-wg-v6/tuntap"}, []string{"flannel0/tuntap", "flannel.1/vxlan"}},
		{"host-gw", nil, []string{"flannel0/tuntap", "flannel.1/vxlan", "flannel-wg/wireguard"}},
	} {
		devs := OtherDevices(c.typ)
		match := func(nt string) bool {
			name, typ, _ := strings.Cut(nt, "/")
			return slices.ContainsFunc(devs, func(d encap.Device) bool { return d.Match(name, typ) })
		}
		for _, nt := range c.keep {
			if match(nt) {
				t.Errorf("%q: removes its own %s", c.typ, nt)
			}
		}
		for _, nt := range c.drop {
			if !match(nt) {
				t.Errorf("%q: leaves another type's %s", c.typ, nt)
			}
		}
	}
}
