package kernel_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/kernel"
)

// TestRouteMTUs: the record alone: Get of what Record set, 0 forgets, a negative MTU
// is an error and changes nothing.
func TestRouteMTUs(t *testing.T) {
	var r kernel.RouteMTUs
	a, b := netip.MustParsePrefix("198.18.1.0/24"), netip.MustParsePrefix("fd00:0:0:2::/64")
	steps := []struct {
		sn        netip.Prefix
		mtu       int
		wantErr   bool
		wantA     int
		wantB     int
		wantCount int
	}{
		{a, 1300, false, 1300, 0, 1},
		{b, 1280, false, 1300, 1280, 2},
		{a, -1, true, 1300, 1280, 2},
		{a, 1350, false, 1350, 1280, 2},
		{a, 0, false, 0, 1280, 1},
	}
	for i, s := range steps {
		err := r.Record(s.sn, s.mtu)
		if (err != nil) != s.wantErr || (err != nil && !errors.Is(err, encap.ErrBadOption)) {
			t.Fatalf("step %d: Record(%v, %d): %v", i, s.sn, s.mtu, err)
		}
		if r.Get(a) != s.wantA || r.Get(b) != s.wantB || r.Len() != s.wantCount {
			t.Fatalf("step %d: a %d b %d len %d, want %d %d %d", i, r.Get(a), r.Get(b), r.Len(), s.wantA, s.wantB, s.wantCount)
		}
	}
}

// TestRouteMTUOnStop: a kernel backend (vxlan, host-gw) writes the MTU path repair
// set into its route to the peer (both families) and, when it stops, leaves the
// route (as flanneld leaves its routes) without that MTU.
func TestRouteMTUOnStop(t *testing.T) {
	for _, typ := range []string{"vxlan", "host-gw"} {
		t.Run(typ, func(t *testing.T) {
			cfg := vxlanConfig(`{"Type":"`+typ+`"}`, true)
			cfg.BackendType = typ
			p := newV6Pair(t, cfg, true)
			p.pingBoth(false)
			setter, ok := p.bes[0].(encap.RouteMTUSetter)
			if !ok {
				t.Fatalf("%s backend sets no route MTU", typ)
			}
			want := map[netip.Prefix]int{v4Nets[1]: 1300, v6Nets[1]: 1280}
			for sn, mtu := range want {
				if err := setter.SetRouteMTU(sn, mtu); err != nil {
					t.Fatal(err)
				}
			}
			for sn, mtu := range want {
				testenv.Eventually(t, 5*time.Second, func() error {
					if r := p.route(0, sn); !strings.Contains(r, fmt.Sprintf(" mtu %d", mtu)) {
						return fmt.Errorf("route to %v: %q, want mtu %d", sn, r, mtu)
					}
					return nil
				})
			}
			if err := p.stop(0); err != nil {
				t.Fatalf("stop: %v", err)
			}
			for sn := range want {
				if r := p.route(0, sn); r == "" || strings.Contains(r, " mtu ") {
					t.Fatalf("after the stop, route to %v: %q, want it without an mtu", sn, r)
				}
			}
		})
	}
}

// route is host i's route to sn as ip shows it ("" for none).
func (p *v6Pair) route(i int, sn netip.Prefix) string {
	fam := "-4"
	if sn.Addr().Is6() {
		fam = "-6"
	}
	return strings.TrimSpace(p.show(i, "ip", fam, "route", "show", sn.String()))
}
