package kernel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/kernel"
	"github.com/weftnet/weft/lease"
)

// applyNet is the network of the apply tests: /29 subnets, 8192 of them.
var applyNet = netip.MustParsePrefix("198.18.0.0/16")

const applyLen = 29

// applyOwn is our own subnet in the apply tests.
var applyOwn = netip.MustParsePrefix("198.18.255.248/29")

// kernelLab is a namespace with eth0 on 192.0.2.10/24 (its veth peer up, so
// 192.0.2.0/24 is on-link) and a kernel backend of one type registered in it.
type kernelLab struct {
	ns   *netns.NS
	k    *kernel.Peers
	be   encap.Backend
	dual bool // the network is dual-stack: eth0 has 2001:db8::10/64 too
}

// applyNet6 is the IPv6 network of the dual-stack apply tests: /64 subnets.
var applyNet6 = netip.MustParsePrefix("fd00:18::/48")

// applyOwn6 is our own IPv6 subnet in the dual-stack apply tests.
var applyOwn6 = netip.MustParsePrefix("fd00:18:0:ffff::/64")

func newKernelLab(t testing.TB, typ string, log *zap.Logger) *kernelLab {
	t.Helper()
	return newKernelLabIn(t, typ, log, false)
}

// newKernelLabIn is newKernelLab, on a dual-stack network when dual is set.
func newKernelLabIn(t testing.TB, typ string, log *zap.Logger, dual bool) *kernelLab {
	t.Helper()
	ns := uplinkNS(t, "weft-apply")
	ctx := context.Background()
	if dual {
		if out, err := ns.Run(ctx, "ip", "-6", "addr", "add", "2001:db8::10/64", "dev", "eth0", "nodad"); err != nil {
			t.Fatalf("ip -6 addr add: %v: %s", err, out)
		}
	}
	l := &kernelLab{ns: ns, dual: dual}
	err := ns.Do(func() error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		cfg := &lease.Config{Network: applyNet, SubnetLen: applyLen, BackendType: typ,
			Backend: json.RawMessage(`{"Type":"` + typ + `"}`)}
		ext := encap.ExternalInterface{Name: "eth0", Index: link.Attrs().Index, MTU: 1500,
			IfaceIP: netip.MustParseAddr("192.0.2.10"), PublicIP: netip.MustParseAddr("192.0.2.10")}
		own := lease.Lease{Subnet: applyOwn, Attrs: lease.Attrs{PublicIP: ext.PublicIP, BackendType: typ}}
		if dual {
			cfg.EnableIPv4, cfg.EnableIPv6, cfg.IPv6Network, cfg.IPv6SubnetLen = true, true, applyNet6, 64
			ext.IfaceIPv6, ext.PublicIPv6 = netip.MustParseAddr("2001:db8::10"), netip.MustParseAddr("2001:db8::10")
			own.IPv6Subnet, own.Attrs.PublicIPv6 = applyOwn6, ext.PublicIPv6
		}
		if l.be, err = newBackend(cfg, ext, log); err != nil {
			return err
		}
		l.k = peersOf(l.be)
		if own.Attrs.BackendData, err = l.be.BackendData(ctx); err != nil {
			return err
		}
		if v6b, ok := l.be.(interface {
			BackendV6Data(context.Context) (json.RawMessage, error)
		}); ok && dual {
			if own.Attrs.BackendV6Data, err = v6b.BackendV6Data(ctx); err != nil {
				return err
			}
		}
		return l.be.Register(ctx, own)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.be.Close() })
	return l
}

// applyPeer is peer i's lease: subnet i of applyNet, PublicIP on the LAN, VtepMAC
// made from mac (vxlan only).
func applyPeer(typ string, i, mac int, pub string) lease.Lease {
	s := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i * 8 >> 8), byte(i * 8)}), applyLen)
	a := lease.Attrs{PublicIP: netip.MustParseAddr(pub), BackendType: typ}
	if typ == "vxlan" {
		a.BackendData = json.RawMessage(fmt.Sprintf(`{"VNI":1,"VtepMAC":"0e:00:00:00:%02x:%02x"}`, mac>>8&0xff, mac&0xff))
	}
	return lease.Lease{Subnet: s, Attrs: a}
}

// applyPeer6 is applyPeer with an IPv6 subnet (i of applyNet6), a PublicIPv6 (pub6
// in 2001:db8::/64) and a VtepMAC of flannel-v6.1 made from mac6 (vxlan only).
func applyPeer6(typ string, i, mac, mac6 int, pub string, i6, pub6 int) lease.Lease {
	l := applyPeer(typ, i, mac, pub)
	l.IPv6Subnet = netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x18, 0, 0, byte(i6 >> 8), byte(i6)}), 64)
	l.Attrs.PublicIPv6 = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(pub6 >> 8), 15: byte(pub6)})
	if typ == "vxlan" {
		l.Attrs.BackendV6Data = json.RawMessage(fmt.Sprintf(`{"VNI":1,"VtepMAC":"0e:00:00:01:%02x:%02x"}`, mac6>>8&0xff, mac6&0xff))
	}
	return l
}

// kernelEntries lists what the namespace's kernel holds for peers in applyNet, one
// line per route, permanent neighbour and fdb entry with a destination, sorted.
func (l *kernelLab) kernelEntries() ([]string, error) {
	var out []string
	err := l.ns.Do(func() error {
		routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if p := kernel.RouteKey(r); p.IsValid() && applyNet.Contains(p.Addr()) && p.Bits() == applyLen && p != applyOwn {
				out = append(out, fmt.Sprintf("route %v via %v dev %d onlink=%v", p, r.Gw, r.LinkIndex, r.Flags&int(netlink.FLAG_ONLINK) != 0))
			}
		}
		if l.dual {
			routes, err := netlink.RouteList(nil, netlink.FAMILY_V6)
			if err != nil {
				return err
			}
			for _, r := range routes {
				if p := kernel.RouteKey(r); p.IsValid() && applyNet6.Contains(p.Addr()) && p.Bits() == 64 && p != applyOwn6 {
					out = append(out, fmt.Sprintf("route %v via %v dev %d onlink=%v", p, r.Gw, r.LinkIndex, r.Flags&int(netlink.FLAG_ONLINK) != 0))
				}
			}
		}
		for _, dev := range []struct {
			name string
			fam  int
			on   bool
		}{{"flannel.1", netlink.FAMILY_V4, true}, {"flannel-v6.1", netlink.FAMILY_V6, l.dual}} {
			link, err := netlink.LinkByName(dev.name)
			if err != nil || !dev.on {
				continue // host-gw: no device
			}
			neighs, err := netlink.NeighList(link.Attrs().Index, dev.fam)
			if err != nil {
				return err
			}
			for _, n := range neighs {
				if n.State&netlink.NUD_PERMANENT != 0 {
					out = append(out, fmt.Sprintf("neigh %v lladdr %v", n.IP, n.HardwareAddr))
				}
			}
			fdb, err := netlink.NeighList(link.Attrs().Index, unix.AF_BRIDGE)
			if err != nil {
				return err
			}
			for _, n := range fdb {
				if n.IP != nil {
					out = append(out, fmt.Sprintf("fdb %v dst %v", n.HardwareAddr, n.IP))
				}
			}
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

// wantEntries is what kernelEntries should show for peers, worked out from the
// leases alone (not with the backend's code).
func (l *kernelLab) wantEntries(t testing.TB, peers map[netip.Prefix]lease.Lease) []string {
	t.Helper()
	var out []string
	var dev, dev6, eth int
	if err := l.ns.Do(func() error {
		if d, err := netlink.LinkByName("flannel.1"); err == nil {
			dev = d.Attrs().Index
		}
		if d, err := netlink.LinkByName("flannel-v6.1"); err == nil {
			dev6 = d.Attrs().Index
		}
		e, err := netlink.LinkByName("eth0")
		if err == nil {
			eth = e.Attrs().Index
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, p := range peers {
		if p.Attrs.BackendType != l.be.Type() {
			continue
		}
		if s6 := p.IPv6Subnet; l.dual && s6.IsValid() {
			if l.be.Type() == "host-gw" {
				out = append(out, fmt.Sprintf("route %v via %v dev %d onlink=false", s6, p.Attrs.PublicIPv6, eth))
			} else {
				var d vxlanData
				if json.Unmarshal(p.Attrs.BackendV6Data, &d) == nil {
					if mac, err := net.ParseMAC(d.VtepMAC); err == nil {
						out = append(out, fmt.Sprintf("route %v via %v dev %d onlink=true", s6, s6.Addr(), dev6),
							fmt.Sprintf("neigh %v lladdr %v", s6.Addr(), mac), fmt.Sprintf("fdb %v dst %v", mac, p.Attrs.PublicIPv6))
					}
				}
			}
		}
		s := p.Subnet
		if !s.IsValid() || s.Bits() == 0 {
			continue // IPv6-only
		}
		if l.be.Type() == "host-gw" {
			out = append(out, fmt.Sprintf("route %v via %v dev %d onlink=false", s, p.Attrs.PublicIP, eth))
			continue
		}
		var d vxlanData
		if json.Unmarshal(p.Attrs.BackendData, &d) != nil {
			continue
		}
		mac, err := net.ParseMAC(d.VtepMAC)
		if err != nil {
			continue
		}
		out = append(out, fmt.Sprintf("route %v via %v dev %d onlink=true", s, s.Addr(), dev),
			fmt.Sprintf("neigh %v lladdr %v", s.Addr(), mac), fmt.Sprintf("fdb %v dst %v", mac, p.Attrs.PublicIP))
	}
	slices.Sort(out)
	return out
}

func (l *kernelLab) stat(name string) uint64 {
	return l.k.Report().Counters[name]
}

func (l *kernelLab) waitKernel(t testing.TB, peers map[netip.Prefix]lease.Lease) {
	t.Helper()
	want := l.wantEntries(t, peers)
	testenv.Eventually(t, 10*time.Second, func() error {
		got, err := l.kernelEntries()
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("kernel holds\n%v\nwant\n%v", got, want)
		}
		return nil
	})
}

// runQuiet runs the backend until the test ends, with a period of an hour: nothing but
// the events a test hands it (and the start) changes the kernel.
func (l *kernelLab) runQuiet(t testing.TB) context.Context {
	l.k.SetPeriod(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = l.be.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return ctx
}

// checkBatch hands a batch of events to the backend and waits for the kernel to hold
// peers, failing if that took a full pass or a netlink listing; a full pass forced
// afterwards must then find nothing to repair.
func (l *kernelLab) checkBatch(ctx context.Context, t testing.TB, events []lease.Event, peers map[netip.Prefix]lease.Lease) {
	t.Helper()
	fulls, lists := l.stat("full_reconciles"), l.stat("netlink_lists")
	l.be.HandleEvents(ctx, events)
	l.waitKernel(t, peers)
	if f, n := l.stat("full_reconciles"), l.stat("netlink_lists"); f != fulls || n != lists {
		t.Fatalf("the batch took full passes %d -> %d, netlink lists %d -> %d; want none", fulls, f, lists, n)
	}
	if l.stat("applies") == 0 {
		t.Fatal("no apply pass counted")
	}
	l.k.Repair()
	testenv.Eventually(t, 10*time.Second, func() error {
		if f := l.stat("full_reconciles"); f == fulls {
			return fmt.Errorf("no full pass yet")
		}
		return nil
	})
	l.waitKernel(t, peers)
	if r := l.k.Report().Repairs; r["route"]+r["neigh"]+r["fdb"] != 0 {
		t.Fatalf("the full pass after the batch repaired %v; the batch left the kernel as wanted", r)
	}
}

// TestKernelApplyEvents: after the first full pass, a batch of lease events (a peer
// gone, one new, a VtepMAC and PublicIP changed, one turned incompatible, one moved to
// another subnet keeping its VtepMAC, one with bad BackendData, one added and removed
// in the batch) reaches the kernel exactly, with no full pass and no netlink listing
// (the period is an hour, so nothing else could mend a miss); a full pass afterwards
// finds nothing to repair.
func TestKernelApplyEvents(t *testing.T) {
	for _, typ := range []string{"vxlan", "host-gw"} {
		t.Run(typ, func(t *testing.T) {
			l := newKernelLab(t, typ, zaptest.NewLogger(t))
			ctx := l.runQuiet(t)

			peers := map[netip.Prefix]lease.Lease{}
			var events []lease.Event
			for i := range 40 {
				p := applyPeer(typ, i, i, fmt.Sprintf("192.0.2.%d", 100+i))
				peers[p.Subnet] = p
				events = append(events, lease.Event{Type: lease.Added, Lease: p})
			}
			l.be.HandleEvents(ctx, events)
			l.waitKernel(t, peers)

			add := func(p lease.Lease) {
				peers[p.Subnet] = p
				events = append(events, lease.Event{Type: lease.Added, Lease: p})
			}
			remove := func(p lease.Lease) {
				delete(peers, p.Subnet)
				events = append(events, lease.Event{Type: lease.Removed, Lease: p})
			}
			events = nil
			remove(applyPeer(typ, 0, 0, "192.0.2.100"))
			add(applyPeer(typ, 500, 500, "192.0.2.200"))
			add(applyPeer(typ, 1, 1001, "192.0.2.201"))
			incompatible := applyPeer(typ, 2, 2, "192.0.2.102")
			incompatible.Attrs.BackendType = "udp"
			add(incompatible)
			remove(applyPeer(typ, 3, 3, "192.0.2.103"))
			add(applyPeer(typ, 501, 3, "192.0.2.103"))
			if typ == "vxlan" {
				bad := applyPeer(typ, 4, 4, "192.0.2.104")
				bad.Attrs.BackendData = json.RawMessage(`{"VtepMAC":"not a MAC"}`)
				add(bad)
			}
			add(applyPeer(typ, 502, 502, "192.0.2.202"))
			remove(applyPeer(typ, 502, 502, "192.0.2.202"))
			l.checkBatch(ctx, t, events, peers)
		})
	}
}

// BenchmarkKernelApply changes one peer's VtepMAC (and PublicIP) per op among n peers
// and applies it the way a batch of lease events is applied; lists/op counts netlink
// dumps (0: the work does not grow with n). The full pass is beside it for scale.
func BenchmarkKernelApply(b *testing.B) {
	for _, n := range []int{100, 1000, 4000} {
		l := newKernelLab(b, "vxlan", zap.NewNop())
		var events []lease.Event
		for i := range n {
			p := applyPeer("vxlan", i, i, fmt.Sprintf("192.0.2.%d", 100+i%150))
			events = append(events, lease.Event{Type: lease.Added, Lease: p})
		}
		l.k.Handle(events)
		if err := l.k.Full(); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("apply/peers=%d", n), func(b *testing.B) {
			lists := l.stat("netlink_lists")
			i := 0
			for b.Loop() {
				p := applyPeer("vxlan", i%n, 0x8000+i%0x4000, fmt.Sprintf("192.0.2.%d", 100+i%2))
				l.k.Handle([]lease.Event{{Type: lease.Added, Lease: p}})
				if err := l.k.Apply([]netip.Prefix{p.Subnet}); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(l.stat("netlink_lists")-lists)/float64(b.N), "lists/op")
		})
		b.Run(fmt.Sprintf("reconcile/peers=%d", n), func(b *testing.B) {
			lists := l.stat("netlink_lists")
			for b.Loop() {
				if err := l.k.Full(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(l.stat("netlink_lists")-lists)/float64(b.N), "lists/op")
		})
	}
}

// TestKernelApplyEventsDualStack: on a dual-stack network, a batch of lease events
// applied per peer reaches the kernel exactly in both families (flannel.1 and
// flannel-v6.1 for vxlan, eth0 for host-gw), with no full pass and no netlink
// listing: a peer gone, one new, one whose IPv6 VtepMAC and PublicIPv6 changed, one
// whose IPv6 subnet moved, one losing and one gaining its IPv6 half, one moved to
// other subnets keeping its VtepMACs, an IPv6-only peer new and one gone, one turning
// IPv6-only (a new key for the same IPv6 entries). A full pass
// afterwards finds nothing to repair.
func TestKernelApplyEventsDualStack(t *testing.T) {
	key := func(l lease.Lease) netip.Prefix {
		if l.Subnet.IsValid() {
			return l.Subnet
		}
		return l.IPv6Subnet
	}
	v6only := func(typ string, i6, mac6, pub6 int) lease.Lease {
		l := applyPeer6(typ, 0, 0, mac6, "192.0.2.1", i6, pub6)
		l.Subnet, l.Attrs.PublicIP, l.Attrs.BackendData = netip.Prefix{}, netip.IPv4Unspecified(), nil
		return l
	}
	for _, typ := range []string{"vxlan", "host-gw"} {
		t.Run(typ, func(t *testing.T) {
			l := newKernelLabIn(t, typ, zaptest.NewLogger(t), true)
			ctx := l.runQuiet(t)

			peers := map[netip.Prefix]lease.Lease{}
			var events []lease.Event
			add := func(p lease.Lease) {
				peers[key(p)] = p
				events = append(events, lease.Event{Type: lease.Added, Lease: p})
			}
			remove := func(p lease.Lease) {
				delete(peers, key(p))
				events = append(events, lease.Event{Type: lease.Removed, Lease: p})
			}
			pub := func(i int) string { return fmt.Sprintf("192.0.2.%d", 100+i) }
			for i := range 30 {
				if i == 4 {
					add(applyPeer(typ, i, i, pub(i)))
					continue
				}
				add(applyPeer6(typ, i, i, i, pub(i), i, 100+i))
			}
			add(v6only(typ, 600, 600, 160))
			l.be.HandleEvents(ctx, events)
			l.waitKernel(t, peers)
			if n := len(l.wantEntries(t, peers)); typ == "vxlan" && n != 3*(30+29+1) || typ == "host-gw" && n != 30+29+1 {
				t.Fatalf("the first snapshot should put %d entries in the kernel for both families", n)
			}

			events = nil
			remove(applyPeer6(typ, 0, 0, 0, pub(0), 0, 100))
			add(applyPeer6(typ, 500, 500, 500, "192.0.2.200", 500, 200))
			add(applyPeer6(typ, 1, 1, 1001, pub(1), 1, 201))
			remove(applyPeer6(typ, 2, 2, 2, pub(2), 2, 102))
			add(applyPeer6(typ, 2, 2, 2, pub(2), 502, 102))
			remove(applyPeer6(typ, 3, 3, 3, pub(3), 3, 103))
			add(applyPeer(typ, 3, 3, pub(3)))
			remove(applyPeer(typ, 4, 4, pub(4)))
			add(applyPeer6(typ, 4, 4, 4, pub(4), 4, 104))
			remove(applyPeer6(typ, 7, 7, 7, pub(7), 7, 107))
			add(applyPeer6(typ, 507, 7, 7, pub(7), 507, 107))
			add(v6only(typ, 503, 503, 203))
			remove(v6only(typ, 600, 600, 160))
			// Turning IPv6-only changes the peer's key, not its IPv6 entries.
			remove(applyPeer6(typ, 8, 8, 8, pub(8), 8, 108))
			add(v6only(typ, 8, 8, 108))
			l.checkBatch(ctx, t, events, peers)
		})
	}
}
