package kernel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// v6Pair is two hosts on one link (eth0: 192.0.2.10/.11 and 2001:db8::10/.11), each
// with a pod (the lab's, behind cni0: 198.18.1i.2 and fd00:0:0:1i::2), running a
// kernel backend fed the other host's lease by hand.
type v6Pair struct {
	t      *testing.T
	ctx    context.Context
	hosts  [2]*netns.NS
	pods   [2]*lab.Pod
	leases [2]lease.Lease
	bes    [2]encap.Backend
	stops  [2]func() // stop(i): host i's Run ends, then its backend is closed
}

// stop ends host i's backend as weftd does when it stops: Run returns, then Close,
// whose error it returns.
func (p *v6Pair) stop(i int) error {
	stop := p.stops[i]
	p.stops[i] = nil
	if stop == nil {
		return nil
	}
	stop()
	be := p.bes[i]
	p.bes[i] = nil
	return be.Close()
}

var (
	v6Under = [2]netip.Addr{netip.MustParseAddr("2001:db8::10"), netip.MustParseAddr("2001:db8::11")}
	v6Nets  = [2]netip.Prefix{netip.MustParsePrefix("fd00:0:0:11::/64"), netip.MustParsePrefix("fd00:0:0:12::/64")}
	v4Nets  = [2]netip.Prefix{netip.MustParsePrefix("198.18.11.0/24"), netip.MustParsePrefix("198.18.12.0/24")}
)

// newV6Pair builds the hosts and pods and starts a backend of cfg on each; with v4
// false the network is IPv6-only (leases without an IPv4 subnet or PublicIP).
func newV6Pair(t *testing.T, cfg *lease.Config, v4on bool) *v6Pair {
	l := labtest.New(t, lab.Spec{Prefix: "wv6", NoRouter: true, Hosts: []lab.HostSpec{{Name: "a"}, {Name: "b"}}})
	testenv.NeedTools(t, "ping", "bridge")
	ctx, cancel := context.WithCancel(context.Background())
	p := &v6Pair{t: t, ctx: ctx}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, be := range p.bes {
			if be != nil {
				_ = be.Close()
			}
		}
	})
	for i, h := range l.Hosts() {
		p.hosts[i] = h.NS
		run(t, h.NS, [][]string{
			{"sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"},
			{"ip", "-6", "addr", "add", v6Under[i].String() + "/64", "dev", "eth0", "nodad"},
		})
		env := lease.SubnetEnv{IPv6Subnet: v6Nets[i]}
		p.leases[i] = lease.Lease{IPv6Subnet: v6Nets[i],
			Attrs: lease.Attrs{PublicIPv6: v6Under[i], BackendType: strings.ToLower(cfg.BackendType)}}
		if v4on {
			env.Subnet = v4Nets[i]
			p.leases[i].Subnet, p.leases[i].Attrs.PublicIP = v4Nets[i], h.Addr
		}
		pod, err := l.AttachPod(ctx, h, env)
		if err != nil {
			t.Fatal(err)
		}
		p.pods[i] = pod
	}
	for i, h := range l.Hosts() {
		err := h.NS.Do(func() error {
			link, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			ext := encap.ExternalInterface{Name: "eth0", Index: link.Attrs().Index, MTU: 1500,
				IfaceIPv6: v6Under[i], PublicIPv6: v6Under[i]}
			if v4on {
				ext.IfaceIP, ext.PublicIP = h.Addr, h.Addr
			}
			be, err := newBackend(cfg, ext, zaptest.NewLogger(t).Named(h.Name))
			if err != nil {
				return err
			}
			p.bes[i] = be
			watchIn(t, be, h.NS.Name)
			if p.leases[i].Attrs.BackendData, err = be.BackendData(ctx); err != nil {
				return err
			}
			if v6b, ok := be.(encap.IPv6DataPublisher); ok {
				if p.leases[i].Attrs.BackendV6Data, err = v6b.BackendV6Data(ctx); err != nil {
					return err
				}
			}
			return be.Register(ctx, p.leases[i])
		})
		if err != nil {
			t.Fatalf("host %s: %v", h.Name, err)
		}
		hctx, hcancel := context.WithCancel(ctx)
		done := make(chan struct{})
		p.stops[i] = func() { hcancel(); <-done }
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done)
			// Run in the host's namespace, as weftd runs in its host's.
			be := p.bes[i]
			if err := h.NS.Do(func() error { return be.Run(hctx) }); err != nil {
				t.Errorf("run: %v", err)
			}
		}()
	}
	for i := range 2 {
		p.bes[i].HandleEvents(ctx, []lease.Event{{Type: lease.Added, Lease: p.leases[1-i]}, {Type: lease.Added, Lease: p.leases[i]}})
	}
	return p
}

func run(t *testing.T, ns *netns.NS, cmds [][]string) {
	t.Helper()
	for _, c := range cmds {
		if out, err := ns.Run(context.Background(), c[0], c[1:]...); err != nil {
			t.Fatalf("%v: %v: %s", c, err, out)
		}
	}
}

// ping pings from pod i to pod 1-i's address in family v6 (or v4), once the kernel
// entries are in place.
func (p *v6Pair) ping(i int, six bool) error {
	dst := p.pods[1-i].Addr
	if six {
		dst = p.pods[1-i].Addr6
	}
	out, err := p.pods[i].NS.Run(p.ctx, "ping", "-c", "1", "-W", "1", dst.String())
	if err != nil {
		return fmt.Errorf("ping from pod %d to %v: %w: %s", i, dst, err, out)
	}
	return nil
}

// pingBoth waits until pods ping each other both ways in the families given.
func (p *v6Pair) pingBoth(families ...bool) {
	p.t.Helper()
	for _, six := range families {
		for i := range 2 {
			testenv.Eventually(p.t, 10*time.Second, func() error { return p.ping(i, six) })
		}
	}
}

// show runs a command on host i and returns its output.
func (p *v6Pair) show(i int, args ...string) string {
	p.t.Helper()
	out, err := p.hosts[i].Run(p.ctx, args[0], args[1:]...)
	if err != nil {
		p.t.Fatalf("%v: %v: %s", args, err, out)
	}
	return out
}

// remove feeds host i the removal of the other host's lease and waits until ip
// lists no entry naming what it lists (the other host's subnet, address or MAC).
func (p *v6Pair) remove(i int, gone map[string][]string) {
	p.t.Helper()
	p.bes[i].HandleEvents(p.ctx, []lease.Event{{Type: lease.Removed, Lease: p.leases[1-i]}})
	for what, cmd := range gone {
		testenv.Eventually(p.t, 5*time.Second, func() error {
			if out := p.show(i, cmd...); strings.Contains(out, what) {
				return fmt.Errorf("%v still lists %s after the lease was removed:\n%s", cmd, what, out)
			}
			return nil
		})
	}
	if err := p.ping(1-i, true); err == nil {
		p.t.Fatal("ping6 still crosses after the lease was removed")
	}
}

func vxlanConfig(backend string, v4on bool) *lease.Config {
	cfg := &lease.Config{EnableIPv6: true, IPv6Network: netip.MustParsePrefix("fd00::/48"), IPv6SubnetLen: 64,
		BackendType: "vxlan", Backend: json.RawMessage(backend)}
	if v4on {
		cfg.EnableIPv4, cfg.Network, cfg.SubnetLen = true, netip.MustParsePrefix("198.18.0.0/16"), 24
	}
	return cfg
}

// TestVXLANDualStack runs vxlan on a dual-stack network: flannel.1 and flannel-v6.1
// as flanneld makes them, ping and ping6 between pods both ways, and a removed lease
// takes its IPv6 route, neighbour and fdb entry along.
func TestVXLANDualStack(t *testing.T) {
	p := newV6Pair(t, vxlanConfig(`{"Type":"vxlan"}`, true), true)
	p.pingBoth(false, true)

	var d vxlanData
	if err := json.Unmarshal(p.leases[1].Attrs.BackendV6Data, &d); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	_ = json.Unmarshal(p.leases[1].Attrs.BackendV6Data, &raw)
	if len(raw) != 2 || d.VNI != 1 || d.VtepMAC == "" {
		t.Fatalf("BackendV6Data %s, want VNI 1 and VtepMAC only", p.leases[1].Attrs.BackendV6Data)
	}
	err := p.hosts[1].Do(func() error {
		l, err := netlink.LinkByName("flannel-v6.1")
		if err != nil {
			return err
		}
		x := l.(*netlink.Vxlan)
		if x.VxlanId != 1 || x.Port != 8472 || x.Learning || x.GBP || x.MTU != 1430 ||
			!x.SrcAddr.Equal(v6Under[1].AsSlice()) || x.HardwareAddr.String() != d.VtepMAC {
			return fmt.Errorf("flannel-v6.1: VNI %d port %d learning %v gbp %v MTU %d local %v MAC %v; want 1 8472 false false 1430 %v %s",
				x.VxlanId, x.Port, x.Learning, x.GBP, x.MTU, x.SrcAddr, x.HardwareAddr, v6Under[1], d.VtepMAC)
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		var global []string
		for _, a := range addrs {
			if !a.IP.IsLinkLocalUnicast() {
				global = append(global, a.IPNet.String())
			}
		}
		if len(global) != 1 || global[0] != "fd00:0:0:12::/128" {
			return fmt.Errorf("flannel-v6.1 addresses %v, want fd00:0:0:12::/128 (and link-local)", global)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	route := p.show(0, "ip", "-6", "route", "show", v6Nets[1].String())
	if !strings.Contains(route, "via fd00:0:0:12:: dev flannel-v6.1") || !strings.Contains(route, "onlink") {
		t.Fatalf("route on host a: %q, want %v via fd00:0:0:12:: dev flannel-v6.1 onlink", route, v6Nets[1])
	}
	if fdb := p.show(0, "bridge", "fdb", "show", "dev", "flannel-v6.1"); !strings.Contains(fdb, d.VtepMAC+" dst 2001:db8::11") {
		t.Fatalf("fdb on host a:\n%s\nwant %s dst 2001:db8::11", fdb, d.VtepMAC)
	}

	// Entries deleted behind the backend's back come back (the netlink watch, in the
	// host's namespace through watchIn; the periodic reconcile is minutes away)
	// and count as repairs.
	run(t, p.hosts[0], [][]string{
		{"ip", "-6", "route", "del", v6Nets[1].String()},
		{"ip", "-6", "neigh", "del", "fd00:0:0:12::", "dev", "flannel-v6.1"},
		{"bridge", "fdb", "del", d.VtepMAC, "dev", "flannel-v6.1", "dst", "2001:db8::11"},
	})
	testenv.Eventually(t, 15*time.Second, func() error {
		if r := p.bes[0].(encap.Reporter).Report().Repairs; r["route"] < 1 || r["neigh"] < 1 || r["fdb"] < 1 {
			return fmt.Errorf("repairs %v, want route, neigh and fdb", r)
		}
		return p.ping(0, true)
	})

	p.remove(0, map[string][]string{
		"fd00:0:0:12::": {"ip", "-6", "route", "show", "dev", "flannel-v6.1"},
		d.VtepMAC:       {"ip", "-6", "neigh", "show", "dev", "flannel-v6.1"},
		"2001:db8::11":  {"bridge", "fdb", "show", "dev", "flannel-v6.1"},
		"198.18.12.0":   {"ip", "route", "show", "dev", "flannel.1"},
	})
}

// TestVXLANIPv6Only runs vxlan with EnableIPv4 false: flannel-v6.1 only, no
// BackendData, and ping6 between pods.
func TestVXLANIPv6Only(t *testing.T) {
	p := newV6Pair(t, vxlanConfig(`{"Type":"vxlan","VNI":4}`, false), false)
	p.pingBoth(true)
	if p.leases[0].Attrs.BackendData != nil || p.leases[0].Attrs.BackendV6Data == nil {
		t.Fatalf("BackendData %s, BackendV6Data %s; want none and the v6 VtepMAC", p.leases[0].Attrs.BackendData, p.leases[0].Attrs.BackendV6Data)
	}
	links := p.show(0, "ip", "-o", "link", "show", "type", "vxlan")
	if !strings.Contains(links, "flannel-v6.4:") || strings.Contains(links, "flannel.4:") {
		t.Fatalf("vxlan devices on an IPv6-only host:\n%s\nwant flannel-v6.4 only", links)
	}
	p.remove(1, map[string][]string{"fd00:0:0:11::": {"ip", "-6", "route", "show", "dev", "flannel-v6.4"}})
}

// TestVXLANDirectRoutingV6: with DirectRouting, a peer on the same IPv6 link gets a
// plain route via its PublicIPv6.
func TestVXLANDirectRoutingV6(t *testing.T) {
	p := newV6Pair(t, vxlanConfig(`{"Type":"vxlan","DirectRouting":true}`, true), true)
	p.pingBoth(false, true)
	if route := p.show(0, "ip", "-6", "route", "show", v6Nets[1].String()); !strings.Contains(route, "via 2001:db8::11 dev eth0") {
		t.Fatalf("route on host a: %q, want %v via 2001:db8::11 dev eth0", route, v6Nets[1])
	}
	p.remove(0, map[string][]string{"fd00:0:0:12::/64": {"ip", "-6", "route", "show"}})
}

// TestHostGWDualStack runs host-gw on a dual-stack network: routes via PublicIP and
// PublicIPv6, ping and ping6 between pods, removal takes the IPv6 route.
func TestHostGWDualStack(t *testing.T) {
	cfg := vxlanConfig(`{"Type":"host-gw"}`, true)
	cfg.BackendType = "host-gw"
	p := newV6Pair(t, cfg, true)
	p.pingBoth(false, true)
	if route := p.show(1, "ip", "-6", "route", "show", v6Nets[0].String()); !strings.Contains(route, "via 2001:db8::10 dev eth0") {
		t.Fatalf("route on host b: %q, want %v via 2001:db8::10 dev eth0", route, v6Nets[0])
	}
	p.remove(1, map[string][]string{"fd00:0:0:11::/64": {"ip", "-6", "route", "show"}})
}

// TestHostGWIPv6Only runs host-gw with EnableIPv4 false: IPv6 routes only, ping6
// between pods.
func TestHostGWIPv6Only(t *testing.T) {
	cfg := vxlanConfig(`{"Type":"host-gw"}`, false)
	cfg.BackendType = "host-gw"
	p := newV6Pair(t, cfg, false)
	p.pingBoth(true)
	if routes := p.show(0, "ip", "route", "show", "dev", "eth0"); strings.Contains(routes, "198.18.") {
		t.Fatalf("IPv4 overlay routes on an IPv6-only host:\n%s", routes)
	}
	p.remove(0, map[string][]string{"fd00:0:0:12::/64": {"ip", "-6", "route", "show"}})
}
