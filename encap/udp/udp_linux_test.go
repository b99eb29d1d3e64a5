package udp

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/proxy"
)

// TestUDPBackendTwoHosts runs the udp backend on two lab hosts linked by a veth:
// Register opens flannel0 there, HandleEvents fills the table, ping crosses both ways,
// a removed lease answers net unreachable, Close leaves flannel0 (persistent) with its
// address and route.
func TestUDPBackendTwoHosts(t *testing.T) {
	l := labtest.New(t, lab.Spec{Prefix: "wudp", NoRouter: true, Hosts: []lab.HostSpec{{Name: "a"}, {Name: "b"}}})
	testenv.NeedTools(t, "ping")
	hosts := l.Hosts()
	nss := [2]*netns.NS{hosts[0].NS, hosts[1].NS}
	under := [2]netip.Addr{hosts[0].Addr, hosts[1].Addr}
	leases := [2]lease.Lease{
		{Subnet: netip.MustParsePrefix("198.18.11.0/24"), Attrs: lease.Attrs{PublicIP: under[0], BackendType: "udp"}},
		{Subnet: netip.MustParsePrefix("198.18.12.0/24"), Attrs: lease.Attrs{PublicIP: under[1]}}, // flanneld: no type
	}
	cfg := &lease.Config{Network: netip.MustParsePrefix("198.18.0.0/16"), SubnetLen: 24, BackendType: "udp",
		Backend: []byte(`{"Type":"udp","Workers":2}`)}
	ctx, bes, stop := startUDPPair(t, cfg, nss, under, leases, 1472)
	for i, be := range bes {
		other := leases[1-i]
		vx := lease.Lease{Subnet: netip.MustParsePrefix("198.18.40.0/24"),
			Attrs: lease.Attrs{PublicIP: netip.MustParseAddr("192.0.2.40"), BackendType: "vxlan"}}
		be.HandleEvents(ctx, []lease.Event{{Type: lease.Added, Lease: other}, {Type: lease.Added, Lease: vx},
			{Type: lease.Added, Lease: leases[i]}})
	}
	ping := func(from int, dst netip.Addr) (string, error) {
		return nss[from].Run(ctx, "ping", "-c", "2", "-i", "0.2", "-W", "2", dst.String())
	}
	for i := range 2 {
		if out, err := ping(i, leases[1-i].Subnet.Addr()); err != nil {
			t.Fatalf("ping from host %d: %v\n%s", i, err, out)
		}
	}
	st, ok := bes[0].(encap.Reporter)
	if !ok {
		t.Fatal("udp backend is not a Reporter")
	}
	s := st.Report().Stats.(proxy.Stats)
	if s.TxPackets < 2 || s.RxPackets < 2 {
		t.Fatalf("stats: %+v", s)
	}
	for _, dst := range []string{"198.18.40.1", "198.18.11.1"} { // vxlan lease, own subnet
		if out, err := ping(1, netip.MustParseAddr(dst)); err == nil {
			t.Fatalf("ping %s went through: %s", dst, out)
		}
	}

	bes[0].HandleEvents(ctx, []lease.Event{{Type: lease.Removed, Lease: leases[1]}})
	out, _ := ping(0, leases[1].Subnet.Addr())
	if !strings.Contains(out, "Net Unreachable") {
		t.Fatalf("no net unreachable after removal: %s", out)
	}

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Stopped, the backend leaves flannel0 (persistent) with its address and the
	// network's route, for the next weftd.
	for i := range bes {
		out, err := nss[i].Run(context.Background(), "ip", "-d", "addr", "show", UDPDevice)
		if err != nil {
			t.Fatalf("flannel0 gone after Close: %v %s", err, out)
		}
		if !strings.Contains(out, "persist on") || !strings.Contains(out, leases[i].Subnet.Addr().String()+"/32") {
			t.Fatalf("flannel0 after Close is not persistent with its address:\n%s", out)
		}
		if routes, _ := nss[i].Run(context.Background(), "ip", "route", "show", "dev", UDPDevice); !strings.Contains(routes, "198.18.0.0/16") {
			t.Fatalf("the network's route on flannel0 went with Close: %s", routes)
		}
	}
}

// TestUDPBackendIPv6 runs the udp backend with EnableIPv6 on two lab hosts whose
// eth0s also have 2001:db8::/64 addresses: flannel0 gets the IPv6 address and route,
// host b's lease has only a PublicIPv6, so both directions go over the IPv6 underlay;
// ping -6 and ping cross between the overlay addresses.
func TestUDPBackendIPv6(t *testing.T) {
	l := labtest.New(t, lab.Spec{Prefix: "wud6", NoRouter: true, Hosts: []lab.HostSpec{{Name: "a"}, {Name: "b"}}})
	testenv.NeedTools(t, "ping")
	hosts := l.Hosts()
	nss := [2]*netns.NS{hosts[0].NS, hosts[1].NS}
	under := [2]netip.Addr{hosts[0].Addr, hosts[1].Addr}
	under6 := [2]netip.Addr{netip.MustParseAddr("2001:db8::a"), netip.MustParseAddr("2001:db8::b")}
	for i, n := range nss {
		if out, err := n.Run(context.Background(), "ip", "-6", "addr", "add", under6[i].String()+"/64", "dev", "eth0", "nodad"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	leases := [2]lease.Lease{
		{Subnet: netip.MustParsePrefix("198.18.21.0/24"), IPv6Subnet: netip.MustParsePrefix("fd00:20:0:21::/64"),
			Attrs: lease.Attrs{PublicIP: under[0], PublicIPv6: under6[0], BackendType: "udp"}},
		{Subnet: netip.MustParsePrefix("198.18.22.0/24"), IPv6Subnet: netip.MustParsePrefix("fd00:20:0:22::/64"),
			Attrs: lease.Attrs{PublicIP: netip.IPv4Unspecified(), PublicIPv6: under6[1], BackendType: "udp"}},
	}
	cfg := &lease.Config{EnableIPv4: true, EnableIPv6: true, Network: netip.MustParsePrefix("198.18.0.0/16"), SubnetLen: 24,
		IPv6Network: netip.MustParsePrefix("fd00:20::/48"), IPv6SubnetLen: 64, BackendType: "udp",
		Backend: []byte(`{"Type":"udp","Workers":1}`)}
	ctx, bes, _ := startUDPPair(t, cfg, nss, under, leases, 1452) // room for the IPv6 underlay
	for i, be := range bes {
		n := nss[i]
		be.HandleEvents(ctx, []lease.Event{{Type: lease.Added, Lease: leases[1-i]}, {Type: lease.Added, Lease: leases[i]}})
		routes := be.(*backend).table.Load().Routes()
		if len(routes) != 2 || routes[0].PublicIP != under6[1-i] || routes[1].PublicIP != under6[1-i] {
			t.Fatalf("host %d routes %v, want both subnets of the other host over %v", i, routes, under6[1-i])
		}
		out, err := n.Run(ctx, "ip", "-6", "route", "show", "dev", UDPDevice)
		if err != nil || !strings.Contains(out, "fd00:20::/48") {
			t.Fatalf("no IPv6 network route on flannel0: %v %s", err, out)
		}
	}
	for i := range 2 {
		for _, dst := range []netip.Addr{leases[1-i].IPv6Subnet.Addr(), leases[1-i].Subnet.Addr()} {
			src := leases[i].IPv6Subnet.Addr()
			if dst.Is4() {
				src = leases[i].Subnet.Addr()
			}
			out, err := nss[i].Run(ctx, "ping", "-c", "2", "-i", "0.2", "-W", "2", "-I", src.String(), dst.String())
			if err != nil {
				t.Fatalf("ping %v from host %d: %v\n%s", dst, i, err, out)
			}
		}
	}
	s := bes[0].(encap.Reporter).Report().Stats.(proxy.Stats)
	if s.TxPackets < 4 || s.RxPackets < 4 || s.Dropped(proxy.DropSendError) != 0 || s.Dropped(proxy.DropUnknownSource) != 0 {
		t.Fatalf("stats: %+v", s)
	}
	bes[0].HandleEvents(ctx, []lease.Event{{Type: lease.Removed, Lease: leases[1]}})
	if n := bes[0].(*backend).table.Load().Len(); n != 0 {
		t.Fatalf("%d routes after the lease's removal", n)
	}
}

// startUDPPair starts a udp backend of cfg in each of the two namespaces (eth0 with the
// underlay address under[i]), registers lease i there and runs it; each must offer
// wantMTU. stop ends and closes both (the first Close error); the test's end calls it
// too.
func startUDPPair(t *testing.T, cfg *lease.Config, nss [2]*netns.NS, under [2]netip.Addr, leases [2]lease.Lease, wantMTU int) (context.Context, [2]encap.Backend, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var bes [2]encap.Backend
	var once sync.Once
	var closeErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			wg.Wait()
			for _, be := range bes {
				if be != nil {
					closeErr = errors.Join(closeErr, be.Close())
				}
			}
		})
		return closeErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	for i, n := range nss {
		ext := encap.ExternalInterface{Name: "eth0", MTU: 1500, IfaceIP: under[i], PublicIP: under[i]}
		be, err := New(cfg, ext, Tuning{}, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		bes[i] = be
		if be.MTU() != wantMTU {
			t.Fatalf("MTU %d, want %d", be.MTU(), wantMTU)
		}
		if err := n.Do(func() error { return be.Register(ctx, leases[i]) }); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := be.Run(ctx); err != nil {
				t.Errorf("run: %v", err)
			}
		}()
	}
	return ctx, bes, stop
}
