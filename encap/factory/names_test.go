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
