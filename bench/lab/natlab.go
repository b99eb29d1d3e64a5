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
	"sync"
	"sync/atomic"

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

// NATSpec describes sites behind masquerading (or only routing) routers and public
// hosts, on one "internet" segment (203.0.113.0/24) that also holds etcd.
type NATSpec struct {
	// Public names the hosts on the internet segment: 203.0.113.10, .11, ...; it
	// may be empty.
	Public []string
	// Sites are at most two: the first's LAN is 192.0.2.0/24, the second's
	// 198.51.100.0/24; site i's router is 203.0.113.(2+i) outside.
	Sites []SiteSpec
}

// SiteMode is what a site's router does to what leaves the site.
type SiteMode string

const (
	// NATMasquerade masquerades what leaves by eth0 as the router's outside
	// address, keeping a socket's source port where it can: one socket shows one
	// outside port to every destination. The empty SiteMode is NATMasquerade.
	// Where two hosts of the site use one port (weft's UDP ports, FixedPorts),
	// Linux masquerade would give it to whichever host reaches a destination
	// first and another port per destination to the other: a race. So the
	// site's first host keeps those ports, and host j (from 0) leaves from
	// OutsidePort(j, port) to every destination, as an endpoint-independent NAT
	// does.
	NATMasquerade SiteMode = "masquerade"
	// NATRandom masquerades with random-fully (iptables' name; nft's fully-random):
	// every new connection, and so every new destination of one socket, gets an
	// outside port of its own, chosen at random (a "symmetric" NAT).
	NATRandom SiteMode = "random-fully"
	// Routed does no NAT: the site's router only routes (and counts), and the lab's
	// router routes the site's LAN to the site router's outside address, so the
	// public hosts and the hosts of other routed sites reach the site's hosts on
	// their LAN addresses, and see them on those, both ways.
	Routed SiteMode = "routed"
)

// masquerade returns the site router's postrouting rule for m ("" for Routed) and
// whether m is a mode at all.
func (m SiteMode) masquerade() (string, bool) {
	switch m {
	case "", NATMasquerade:
		return `oifname "eth0" masquerade`, true
	case NATRandom:
		return `oifname "eth0" masquerade fully-random`, true
	case Routed:
		return "", true
	}
	return "", false
}

// SiteSpec is one site: its name, its hosts (.10, .11, ... of its LAN) and what its
// router does (NATMasquerade when empty).
type SiteSpec struct {
	Name  string
	Hosts []string
	Mode  SiteMode
}

// Site is a built site: a switch namespace (the LAN's bridge and nothing else, so
// that traffic between the site's hosts never passes the router) and a router
// namespace that masquerades what leaves it (nftables, no port forwards; with Mode
// Routed it does not) and counts in its forward chain every packet it routes.
type Site struct {
	Name    string
	Mode    SiteMode  // never empty: NATMasquerade for an empty SiteSpec.Mode
	Router  *netns.NS // eth0 outside, eth1 inside
	Switch  *netns.NS
	LAN     netip.Prefix
	Inside  netip.Addr // the router's address on the LAN, the hosts' gateway
	Outside netip.Addr // the router's address on the internet segment
	Hosts   []*Host
}

// siteTable is the site router's nftables ruleset: a named counter of forwarded
// packets and, in the NAT modes, masquerade of everything that leaves by eth0 and
// the firewall of a home or cloud NAT: what arrives from outside for the router
// itself, unasked, is dropped. Dropped before conntrack confirms it, such a packet
// leaves no entry behind; without the drop, a peer's first punching datagram would
// be tracked as a connection to the router, take the tuple our host's own datagram
// to that peer needs, and masquerade would give that one another port.
func siteTable(mode SiteMode, hosts []netip.Addr, outside netip.Addr) string {
	nat := ""
	if rule, _ := mode.masquerade(); rule != "" {
		fixed := ""
		for j, h := range hosts {
			for _, port := range FixedPorts {
				if mode == NATMasquerade && j > 0 {
					fixed += fmt.Sprintf(`ip saddr %v udp sport %d snat to %v:%d; `, h, port, outside, OutsidePort(j, port))
				}
			}
		}
		nat = "\tchain postrouting { type nat hook postrouting priority srcnat; policy accept; " + fixed + rule + "; }\n" +
			"\tchain input { type filter hook input priority 0; policy accept; iifname \"eth0\" ct state new drop; }\n"
	}
	return `table ip weftlab {
	counter forwarded {}
	chain forward { type filter hook forward priority 0; policy accept; counter name "forwarded"; }
` + nat + "}\n"
}

// FixedPorts are the UDP ports a NATMasquerade site maps host by host rather than
// by race: weft's WireGuard port, its path port and the udp backend's port.
var FixedPorts = []uint16{51820, 51822, 8285}

// maxMasqueradeHosts is how many hosts a NATMasquerade site may have: each after
// the first takes a block of 1,000 outside ports from 61000 up.
const maxMasqueradeHosts = 5

// OutsidePort is the outside port of a NATMasquerade site's host j (from 0) for
// its inside port, one of FixedPorts: the port itself for the first host, and
// 60000 + 1000*j + port%1000 for the others (host 1's 51820 is 61820): above
// Linux's ephemeral ports, so masquerade never hands them out.
func OutsidePort(j int, port uint16) uint16 {
	if j == 0 {
		return port
	}
	return uint16(60000 + 1000*j + int(port)%1000)
}

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
// and each site gets its switch, router (masquerading, or routed to by the lab's
// router, as its Mode says) and hosts. Hosts have eth0, forwarding on and a default
// route via their segment's router; the lab's daemons, pods and Close work on them
// as on any host. It returns the sites by name.
func (l *Lab) BuildNAT(ctx context.Context, spec NATSpec) (map[string]*Site, error) {
	l.mu.Lock()
	bad := l.router == nil || len(l.endpoints) > 0 || len(l.hosts) > 0
	l.mu.Unlock()
	if bad || len(spec.Sites) > 2 {
		return nil, fmt.Errorf("%w: a NAT lab needs a router, no etcd, no hosts yet and at most two sites", ErrSpec)
	}
	for _, ss := range spec.Sites {
		if _, ok := ss.Mode.masquerade(); !ok {
			return nil, fmt.Errorf("%w: site %s: mode %q", ErrSpec, ss.Name, ss.Mode)
		}
		if (ss.Mode == "" || ss.Mode == NATMasquerade) && len(ss.Hosts) > maxMasqueradeHosts {
			return nil, fmt.Errorf("%w: site %s: %d hosts behind masquerade, at most %d", ErrSpec, ss.Name, len(ss.Hosts), maxMasqueradeHosts)
		}
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
	s := &Site{Name: ss.Name, Mode: ss.Mode, LAN: lan, Inside: lan.Addr().Next(), Outside: nthAddr(internetNet, 2+i)}
	if s.Mode == "" {
		s.Mode = NATMasquerade
	}
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
		var hosts []netip.Addr
		for j := range ss.Hosts {
			hosts = append(hosts, nthAddr(lan, 10+j))
		}
		err = nftScript(ctx, s.Router, siteTable(s.Mode, hosts, s.Outside))
	}
	if err == nil && s.Mode == Routed {
		err = l.routeTo(ctx, s)
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

// routeTo routes the LAN of routed site s, on the lab's router, to s's router. The
// lab's router sends no ICMP redirects (it forwards by the interface a packet came
// in on), so that traffic to a routed site keeps crossing it as it would cross the
// internet rather than going straight across the segment.
func (l *Lab) routeTo(ctx context.Context, s *Site) error {
	return runAll(ctx, l.router, [][]string{
		{"sysctl", "-qw", "net.ipv4.conf.all.send_redirects=0"},
		{"sysctl", "-qw", "net.ipv4.conf.br0.send_redirects=0"},
		{"ip", "route", "add", s.LAN.String(), "via", s.Outside.String()},
	})
}

// nftScript runs the nft script in ns, as one transaction.
func nftScript(ctx context.Context, ns *netns.NS, script string) error {
	cmd := ns.Command(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, out)
	}
	return nil
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

// blockTable starts the name of every nftables table of a UDP block: weftblock-1,
// weftblock-2, ..., one a block (blockSeq numbers them), so that lifting a block
// removes exactly its rules and leaves nothing behind.
const blockTable = "weftblock"

var blockSeq atomic.Uint64

// ErrBlock is wrapped by errors about addresses UDP cannot be blocked between.
var ErrBlock = errors.New("bad UDP block")

// BlockUDP drops on the lab's router every UDP packet from a to b and from b to a,
// counting them (DroppedUDP): those it routes and those its bridges carry from port
// to port alike. On the internet segment of a NAT lab, a and b are the addresses
// seen there: a site's outside address (NAT modes), a routed site's host's LAN
// address, a public host's address. Nothing else is dropped (ping passes). The
// rules are an nftables table bridge weftblock-N of their own, on the prerouting
// and output hooks: the bridge family sees what the router's bridges carry whether
// or not br_netfilter shows it to the ip family too, and what the router routes or
// sends as it enters or leaves a bridge. unblock deletes exactly that table (a
// second call does nothing, and neither does a call after the lab's Close, which
// deletes the router and so the table).
func (l *Lab) BlockUDP(ctx context.Context, a, b netip.Addr) (unblock func(context.Context) error, err error) {
	if l.router == nil {
		return nil, ErrNoRouter
	}
	return blockUDP(ctx, l.router, "bridge", a, b)
}

// DroppedUDP returns how many packets the lab router's UDP blocks in force (see
// BlockUDP) have dropped.
func (l *Lab) DroppedUDP(ctx context.Context) (uint64, error) {
	if l.router == nil {
		return 0, ErrNoRouter
	}
	return droppedUDP(ctx, l.router, "bridge")
}

// BlockUDP is Lab.BlockUDP on the site's router, which sees its hosts on their LAN
// addresses (before it masquerades them): it drops every UDP packet between a and b
// that it routes, sends or receives, both ways; the table is ip weftblock-N.
func (s *Site) BlockUDP(ctx context.Context, a, b netip.Addr) (unblock func(context.Context) error, err error) {
	unblock, err = blockUDP(ctx, s.Router, "ip", a, b)
	if err != nil {
		return nil, fmt.Errorf("site %s: %w", s.Name, err)
	}
	return unblock, nil
}

// DroppedUDP returns how many packets the site router's UDP blocks in force have
// dropped.
func (s *Site) DroppedUDP(ctx context.Context) (uint64, error) {
	n, err := droppedUDP(ctx, s.Router, "ip")
	if err != nil {
		return 0, fmt.Errorf("site %s: %w", s.Name, err)
	}
	return n, nil
}

// blockUDP adds to ns a table of family that drops UDP between a and b, and returns
// what deletes it.
func blockUDP(ctx context.Context, ns *netns.NS, family string, a, b netip.Addr) (func(context.Context) error, error) {
	if !a.Is4() || !b.Is4() {
		return nil, fmt.Errorf("%w: %v and %v: IPv4 addresses only", ErrBlock, a, b)
	}
	table := fmt.Sprintf("%s %s-%d", family, blockTable, blockSeq.Add(1))
	if err := nftScript(ctx, ns, blockRules(table, a, b)); err != nil {
		return nil, fmt.Errorf("block UDP between %v and %v: %w", a, b, err)
	}
	var mu sync.Mutex
	done := false
	return func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return nil
		}
		// A namespace already gone took the table with it.
		if err := nftScript(ctx, ns, "delete table "+table+"\n"); err != nil && netns.Exists(ns.Name) {
			return fmt.Errorf("unblock UDP between %v and %v: %w", a, b, err)
		}
		done = true
		return nil
	}, nil
}

// blockRules is the nft script that makes table (family and name) with a counter
// "dropped" and chains on the prerouting and output hooks that drop, and count, UDP
// from a to b and from b to a. It fails if the table exists.
func blockRules(table string, a, b netip.Addr) string {
	drop := fmt.Sprintf(`ip saddr %[1]s ip daddr %[2]s ip protocol udp counter name "dropped" drop; `+
		`ip saddr %[2]s ip daddr %[1]s ip protocol udp counter name "dropped" drop;`, a, b)
	return fmt.Sprintf(`create table %[1]s
table %[1]s {
	counter dropped {}
	chain prerouting { type filter hook prerouting priority 0; policy accept; %[2]s }
	chain output { type filter hook output priority 0; policy accept; %[2]s }
}
`, table, drop)
}

// droppedUDP sums the "dropped" counters of the block tables of family in ns.
func droppedUDP(ctx context.Context, ns *netns.NS, family string) (uint64, error) {
	out, err := ns.Run(ctx, "nft", "list", "counters")
	if err != nil {
		return 0, fmt.Errorf("dropped UDP: %w", err)
	}
	var total uint64
	in := false
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "table" {
			in = f[1] == family && strings.HasPrefix(f[2], blockTable+"-")
			continue
		}
		if m := counterRE.FindStringSubmatch(line); in && m != nil {
			n, err := strconv.ParseUint(m[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("dropped UDP: %w", err)
			}
			total += n
		}
	}
	return total, nil
}
