package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/bench/netns"
)

// The "internet" of a NAT lab: TEST-NET-3, the lab's router namespace at .1 (etcd),
// site routers from .2, public hosts from .10.
var internetNet = netip.MustParsePrefix("203.0.113.0/24")

// Internet is the LAN name of the public hosts of a NAT lab.
const Internet = "internet"

// InternetEtcd is where the etcd of a NAT lab listens, on the internet segment.
const InternetEtcd = "http://203.0.113.1:2379"

// NATSpec describes sites behind masquerading routers and public hosts, on one
// "internet" segment (203.0.113.0/24) that also holds etcd.
type NATSpec struct {
	// Public names the hosts on the internet segment: 203.0.113.10, .11, ...
	Public []string
	// Sites are at most two: the first's LAN is 192.0.2.0/24, the second's
	// 198.51.100.0/24; site i's router is 203.0.113.(2+i) outside.
	Sites []SiteSpec
}

// SiteSpec is one site: its name and its hosts (.10, .11, ... of its LAN).
type SiteSpec struct {
	Name  string
	Hosts []string
}

// Site is a built site: a switch namespace (the LAN's bridge and nothing else, so
// that traffic between the site's hosts never passes the router) and a router
// namespace that masquerades what leaves it (nftables, no port forwards) and counts
// in its forward chain every packet it routes.
type Site struct {
	Name    string
	Router  *netns.NS // eth0 outside, eth1 inside
	Switch  *netns.NS
	LAN     netip.Prefix
	Inside  netip.Addr // the router's address on the LAN, the hosts' gateway
	Outside netip.Addr // the address the site's traffic leaves with
	Hosts   []*Host
}

// natTable is the site router's nftables ruleset: a named counter of forwarded
// packets and masquerade of everything that leaves by eth0.
const natTable = `table ip weftlab {
	counter forwarded {}
	chain forward { type filter hook forward priority 0; policy accept; counter name "forwarded"; }
	chain postrouting { type nat hook postrouting priority srcnat; policy accept; oifname "eth0" masquerade; }
}
`

var counterRE = regexp.MustCompile(`packets (\d+) bytes (\d+)`)

// Forwarded returns how many packets the site's router has routed (either way).
func (s *Site) Forwarded(ctx context.Context) (uint64, error) {
	out, err := s.Router.Run(ctx, "nft", "list", "counter", "ip", "weftlab", "forwarded")
	if err != nil {
		return 0, fmt.Errorf("site %s: %w", s.Name, err)
	}
	m := counterRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("site %s: no counter in %q", s.Name, out)
	}
	return strconv.ParseUint(m[1], 10, 64)
}

// FlushConntrack drops every connection the site's router tracks (its NAT
// mappings): the next packet out gets a new mapping, perhaps another port.
func (s *Site) FlushConntrack(ctx context.Context) error {
	if _, err := s.Router.Run(ctx, "conntrack", "-F"); err != nil {
		return fmt.Errorf("site %s: %w", s.Name, err)
	}
	return nil
}

// BuildNAT turns a lab built with Spec{NoEtcd: true} and no hosts into the NAT
// topology of spec: the lab's router becomes the internet segment (bridge br0,
// 203.0.113.1/24, etcd on InternetEtcd, its LAN bridges gone), public hosts join it,
// and each site gets its switch, masquerading router and hosts. Hosts have eth0,
// forwarding on and a default route via their segment's router; the lab's daemons,
// pods and Close work on them as on any host. It returns the sites by name.
func (l *Lab) BuildNAT(ctx context.Context, spec NATSpec) (map[string]*Site, error) {
	l.mu.Lock()
	bad := l.router == nil || len(l.endpoints) > 0 || len(l.hosts) > 0
	l.mu.Unlock()
	if bad || len(spec.Sites) > 2 {
		return nil, fmt.Errorf("%w: a NAT lab needs a router, no etcd, no hosts yet and at most two sites", ErrSpec)
	}
	err := runAll(ctx, l.router, [][]string{
		{"ip", "link", "del", "br1"}, {"ip", "link", "del", "br2"},
		{"ip", "link", "add", "br0", "type", "bridge"},
		{"ip", "addr", "add", "203.0.113.1/24", "dev", "br0"},
		{"ip", "link", "set", "br0", "up"},
	})
	if err != nil {
		return nil, fmt.Errorf("internet: %w", err)
	}
	gw := internetNet.Addr().Next()
	for i, name := range spec.Public {
		if _, err := l.natHost(ctx, name, Internet, nthAddr(internetNet, 10+i), gw, l.router, "br0"); err != nil {
			return nil, err
		}
	}
	sites := map[string]*Site{}
	for i, ss := range spec.Sites {
		s, err := l.buildSite(ctx, i, ss)
		if err != nil {
			return nil, err
		}
		sites[ss.Name] = s
	}
	s, err := etcdproc.Start(ctx, etcdproc.Options{Binary: l.spec.EtcdBinary, Netns: l.router.Name,
		Host: gw.String(), Port: 2379, Dir: filepath.Join(l.dir, "etcd")})
	if err != nil {
		return nil, fmt.Errorf("lab etcd: %w", err)
	}
	l.mu.Lock()
	l.etcd, l.endpoints = s, []string{s.Endpoint()}
	l.mu.Unlock()
	l.saveState()
	return sites, nil
}

func (l *Lab) buildSite(ctx context.Context, i int, ss SiteSpec) (*Site, error) {
	lan := []netip.Prefix{lan1Net, lan2Net}[i]
	s := &Site{Name: ss.Name, LAN: lan, Inside: lan.Addr().Next(), Outside: nthAddr(internetNet, 2+i)}
	var err error
	if s.Router, err = l.extraNS("r" + ss.Name); err != nil {
		return nil, err
	}
	if s.Switch, err = l.extraNS("s" + ss.Name); err != nil {
		return nil, err
	}
	if err := netns.Veth(s.Router, "eth0", l.router, "r-"+ss.Name); err != nil {
		return nil, fmt.Errorf("site %s: %w", ss.Name, err)
	}
	if err := netns.Veth(s.Router, "eth1", s.Switch, "r"); err != nil {
		return nil, fmt.Errorf("site %s: %w", ss.Name, err)
	}
	err = runAll(ctx, l.router, [][]string{{"ip", "link", "set", "r-" + ss.Name, "master", "br0"}})
	if err == nil {
		err = runAll(ctx, s.Switch, [][]string{
			{"ip", "link", "add", "br0", "type", "bridge"}, {"ip", "link", "set", "br0", "up"},
			{"ip", "link", "set", "r", "master", "br0"},
		})
	}
	if err == nil {
		err = runAll(ctx, s.Router, [][]string{
			{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
			{"ip", "addr", "add", s.Outside.String() + "/24", "dev", "eth0"},
			{"ip", "addr", "add", s.Inside.String() + "/24", "dev", "eth1"},
			{"ip", "route", "add", "default", "via", internetNet.Addr().Next().String()},
		})
	}
	if err == nil {
		cmd := s.Router.Command(ctx, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(natTable)
		if out, e := cmd.CombinedOutput(); e != nil {
			err = fmt.Errorf("nft: %w: %s", e, out)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("site %s: %w", ss.Name, err)
	}
	for j, name := range ss.Hosts {
		h, err := l.natHost(ctx, name, ss.Name, nthAddr(lan, 10+j), s.Inside, s.Switch, "br0")
		if err != nil {
			return nil, err
		}
		s.Hosts = append(s.Hosts, h)
	}
	return s, nil
}

// extraNS makes a namespace the lab removes on Close.
func (l *Lab) extraNS(name string) (*netns.NS, error) {
	ns, err := netns.New(l.spec.Prefix + "-" + name)
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", name, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errors.Join(ErrClosed, ns.Close())
	}
	l.nsExtra = append(l.nsExtra, ns)
	return ns, nil
}

// natHost makes host name at addr with eth0 plugged into bridge br of sw.
func (l *Lab) natHost(ctx context.Context, name, lan string, addr, gw netip.Addr, sw *netns.NS, br string) (*Host, error) {
	l.mu.Lock()
	if name == "" || l.byName[name] != nil {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: host name %q empty or repeated", ErrSpec, name)
	}
	h := &Host{Name: name, LAN: lan, Addr: addr, Router: gw, index: len(l.hosts)}
	l.hosts = append(l.hosts, h)
	l.byName[name] = h
	l.mu.Unlock()
	ns, err := l.extraNS(name)
	if err != nil {
		return nil, err
	}
	h.NS = ns
	l.saveState()
	port := "h-" + name
	if err := netns.Veth(ns, "eth0", sw, port); err != nil {
		return nil, fmt.Errorf("host %s: veth: %w", name, err)
	}
	if err := runAll(ctx, sw, [][]string{{"ip", "link", "set", port, "master", br}}); err != nil {
		return nil, fmt.Errorf("host %s: %w", name, err)
	}
	err = runAll(ctx, ns, [][]string{
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"ip", "addr", "add", addr.String() + "/24", "dev", "eth0"},
		{"ip", "route", "add", "default", "via", gw.String()},
	})
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", name, err)
	}
	return h, nil
}

// nthAddr is the address n of the IPv4 prefix p (p's address plus n).
func nthAddr(p netip.Prefix, n int) netip.Addr {
	a := p.Addr().As4()
	a[3] += byte(n)
	return netip.AddrFrom4(a)
}
