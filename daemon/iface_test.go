package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/netnstest"
)

// TestExternalInterface picks interfaces in a namespace holding uplinks eth0
// (192.0.2.10/24, the default route), eth12 (198.51.100.5/24) and bare (no address),
// as flanneld's --iface, --iface-regex, --iface-can-reach and --public-ip would.
func TestExternalInterface(t *testing.T) {
	ns := netnstest.New(t, "weft-iface")
	netnstest.Uplink(t, ns, "eth0", "192.0.2.10/24")
	netnstest.Uplink(t, ns, "eth12", "198.51.100.5/24")
	netnstest.Uplink(t, ns, "bare")
	if out, err := ns.Run(context.Background(), "ip", "route", "add", "default", "via", "192.0.2.1", "dev", "eth0"); err != nil {
		t.Fatalf("default route: %v: %s", err, out)
	}
	tests := []struct {
		name     string
		c        ifaceChoice
		wantName string
		wantIP   string // IfaceIP
		wantPub  string // PublicIP; empty: IfaceIP
		wantErr  string
	}{
		{name: "default route", wantName: "eth0", wantIP: "192.0.2.10"},
		{name: "by name", c: ifaceChoice{ifaces: []string{"eth12"}}, wantName: "eth12", wantIP: "198.51.100.5"},
		{name: "by IP", c: ifaceChoice{ifaces: []string{"198.51.100.5"}}, wantName: "eth12", wantIP: "198.51.100.5"},
		{name: "first existing iface wins", c: ifaceChoice{ifaces: []string{"nope", "bare", "eth12", "eth0"}}, wantName: "eth12", wantIP: "198.51.100.5"},
		{name: "regex with a comma", c: ifaceChoice{regexes: []string{`^eth[0-9]{2,3}$`}}, wantName: "eth12", wantIP: "198.51.100.5"},
		{name: "regex matches an address first", c: ifaceChoice{regexes: []string{`^198\.51\.`}}, wantName: "eth12", wantIP: "198.51.100.5"},
		{name: "iface matching nothing falls through to the regex", c: ifaceChoice{ifaces: []string{"nope"}, regexes: []string{"^eth1"}},
			wantName: "eth12", wantIP: "198.51.100.5"},
		{name: "bad regex then a good one", c: ifaceChoice{regexes: []string{"(", "eth0"}}, wantName: "eth0", wantIP: "192.0.2.10"},
		{name: "iface wins over regex", c: ifaceChoice{ifaces: []string{"eth0"}, regexes: []string{"eth12"}}, wantName: "eth0", wantIP: "192.0.2.10"},
		{name: "can-reach", c: ifaceChoice{canReach: "198.51.100.77"}, wantName: "eth12", wantIP: "198.51.100.5"},
		{name: "can-reach via the default route", c: ifaceChoice{canReach: "198.18.0.1"}, wantName: "eth0", wantIP: "192.0.2.10"},
		{name: "iface and regex miss, can-reach finds", c: ifaceChoice{ifaces: []string{"nope"}, regexes: []string{"^zz"}, canReach: "198.51.100.1"},
			wantName: "eth12", wantIP: "198.51.100.5"},
		{name: "public IP names the interface", c: ifaceChoice{publicIP: "198.51.100.5"}, wantName: "eth12", wantIP: "198.51.100.5"},
		{name: "public IP held by no interface", c: ifaceChoice{publicIP: "198.18.9.9"}, wantName: "eth0", wantIP: "192.0.2.10", wantPub: "198.18.9.9"},
		{name: "public IP with iface", c: ifaceChoice{ifaces: []string{"eth12"}, publicIP: "192.0.2.99"}, wantName: "eth12", wantIP: "198.51.100.5", wantPub: "192.0.2.99"},
		{name: "nothing matches", c: ifaceChoice{ifaces: []string{"nope"}, regexes: []string{"^zz"}}, wantErr: "--iface-regex=^zz"},
		{name: "iface without address", c: ifaceChoice{ifaces: []string{"bare"}}, wantErr: "bare has no IPv4 address"},
		{name: "can-reach not an IP", c: ifaceChoice{canReach: "eth0"}, wantErr: "--iface-can-reach=eth0"},
		{name: "bad public IP", c: ifaceChoice{ifaces: []string{"eth0"}, publicIP: "x"}, wantErr: "--public-ip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ext struct{ name, ip, pub string }
			var err error
			if derr := ns.Do(func() error {
				e, ferr := externalInterface(tt.c)
				err = ferr
				ext.name, ext.ip, ext.pub = e.Name, e.IfaceIP.String(), e.PublicIP.String()
				return nil
			}); derr != nil {
				t.Fatal(derr)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one naming %q", err, tt.wantErr)
				}
				if tt.c.publicIP == "" && !errors.Is(err, errNoInterface) {
					t.Fatalf("error %v does not wrap errNoInterface", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			pub := tt.wantPub
			if pub == "" {
				pub = tt.wantIP
			}
			if ext.name != tt.wantName || ext.ip != tt.wantIP || ext.pub != pub {
				t.Fatalf("got %s %s public %s, want %s %s public %s", ext.name, ext.ip, ext.pub, tt.wantName, tt.wantIP, pub)
			}
		})
	}
}

// TestExternalInterfaceIPv6 picks interfaces and their IPv6 addresses, as flanneld
// does on dual-stack and IPv6-only networks, in a namespace holding uplinks eth0
// (192.0.2.10/24, 2001:db8:1::10/64, both default routes), eth12 (198.51.100.5/24,
// 2001:db8:12::5/64) and v4only (192.0.2.77/32, no IPv6).
func TestExternalInterfaceIPv6(t *testing.T) {
	ns := netnstest.New(t, "weft-iface6")
	ctx := context.Background()
	netnstest.Uplink(t, ns, "eth0", "192.0.2.10/24", "2001:db8:1::10/64")
	netnstest.Uplink(t, ns, "eth12", "198.51.100.5/24", "2001:db8:12::5/64")
	netnstest.Uplink(t, ns, "v4only", "192.0.2.77/32")
	for _, cmd := range [][]string{
		{"route", "add", "default", "via", "192.0.2.1", "dev", "eth0"},
		{"-6", "route", "add", "default", "via", "2001:db8:1::1", "dev", "eth0"},
	} {
		if out, err := ns.Run(ctx, "ip", cmd...); err != nil {
			t.Fatalf("ip %v: %v: %s", cmd, err, out)
		}
	}
	dual := func(c ifaceChoice) ifaceChoice { c.ipv6 = true; return c }
	v6only := func(c ifaceChoice) ifaceChoice { c.ipv6, c.noIPv4 = true, true; return c }
	tests := []struct {
		name    string
		c       ifaceChoice
		want    string // "name ip public-ip ipv6 public-ipv6"
		wantErr string
	}{
		{name: "dual default route", c: dual(ifaceChoice{}), want: "eth0 192.0.2.10 192.0.2.10 2001:db8:1::10 2001:db8:1::10"},
		{name: "v6-only default route", c: v6only(ifaceChoice{}), want: "eth0 invalid IP 0.0.0.0 2001:db8:1::10 2001:db8:1::10"},
		{name: "dual by name", c: dual(ifaceChoice{ifaces: []string{"eth12"}}), want: "eth12 198.51.100.5 198.51.100.5 2001:db8:12::5 2001:db8:12::5"},
		{name: "dual by IPv6 address", c: dual(ifaceChoice{ifaces: []string{"2001:db8:12::5"}}), want: "eth12 198.51.100.5 198.51.100.5 2001:db8:12::5 2001:db8:12::5"},
		{name: "v6-only by IPv6 address", c: v6only(ifaceChoice{ifaces: []string{"2001:db8:12::5"}}), want: "eth12 invalid IP 0.0.0.0 2001:db8:12::5 2001:db8:12::5"},
		{name: "v6-only regex on the IPv6 address", c: v6only(ifaceChoice{regexes: []string{`^2001:db8:12:`}}), want: "eth12 invalid IP 0.0.0.0 2001:db8:12::5 2001:db8:12::5"},
		{name: "dual regex needs both families to match", c: dual(ifaceChoice{regexes: []string{`^(198\.51\.|2001:db8:12:)`}}),
			want: "eth12 198.51.100.5 198.51.100.5 2001:db8:12::5 2001:db8:12::5"},
		{name: "v6-only public IPv6 names the interface", c: v6only(ifaceChoice{publicIPv6: "2001:db8:12::5"}), want: "eth12 invalid IP 0.0.0.0 2001:db8:12::5 2001:db8:12::5"},
		{name: "public IPv6 held by no interface", c: dual(ifaceChoice{ifaces: []string{"eth0"}, publicIPv6: "2001:db8:99::1"}),
			want: "eth0 192.0.2.10 192.0.2.10 2001:db8:1::10 2001:db8:99::1"},
		{name: "can-reach an IPv6 address", c: v6only(ifaceChoice{canReach: "2001:db8:12::99"}), want: "eth12 invalid IP 0.0.0.0 2001:db8:12::5 2001:db8:12::5"},
		{name: "dual interface without IPv6", c: dual(ifaceChoice{ifaces: []string{"v4only"}}), wantErr: "v4only has no IPv6 address"},
		{name: "bad public IPv6", c: dual(ifaceChoice{ifaces: []string{"eth0"}, publicIPv6: "192.0.2.1"}), wantErr: "--public-ipv6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got string
			var err error
			if derr := ns.Do(func() error {
				e, ferr := externalInterface(tt.c)
				err = ferr
				got = strings.Join([]string{e.Name, e.IfaceIP.String(), e.PublicIP.String(), e.IfaceIPv6.String(), e.PublicIPv6.String()}, " ")
				return nil
			}); derr != nil {
				t.Fatal(derr)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}

	// Dual stack with the two default routes on different interfaces: refused, as
	// flanneld refuses it.
	if out, err := ns.Run(ctx, "ip", "-6", "route", "replace", "default", "via", "2001:db8:12::1", "dev", "eth12"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var err error
	if derr := ns.Do(func() error { _, err = externalInterface(ifaceChoice{ipv6: true}); return nil }); derr != nil {
		t.Fatal(derr)
	}
	if !errors.Is(err, errNoInterface) || !strings.Contains(err.Error(), "different interfaces") {
		t.Fatalf("split default routes: %v, want errNoInterface naming both", err)
	}
}
