// Package lab builds a one-machine lab of network namespaces, the one topology behind
// weft's demo, benchmarks, end-to-end tests and the package tests of the data path:
// hosts on one or two underlay LANs, a router between the LANs that also runs etcd,
// overlay daemons on the hosts, and pod namespaces attached by the real flannel CNI
// plugin or, without a plugin, to each host's cni0 bridge as the bridge plugin would.
//
// A lab without a router (Spec.NoRouter) is two hosts joined by one veth and nothing
// else: for tests and benchmarks that run a data path in-process inside a host's
// namespace (Host.NS.Do) and want no hop between the hosts.
package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"

	"go.uber.org/zap"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/bench/netns"
)

// The two underlay LANs and the overlay network of the lab.
const (
	LAN1 = "lan1" // 192.0.2.0/24, router 192.0.2.1
	LAN2 = "lan2" // 198.51.100.0/24, router 198.51.100.1
)

var (
	lan1Net = netip.MustParsePrefix("192.0.2.0/24")
	lan2Net = netip.MustParsePrefix("198.51.100.0/24")
	// Overlay is the network config's Network.
	Overlay = netip.MustParsePrefix("198.18.0.0/16")
)

// EtcdEndpoint is where the lab's etcd listens, inside the router namespace; every
// host reaches it through its default route.
const EtcdEndpoint = "http://192.0.2.1:2379"

// ErrSpec is wrapped by errors about an invalid Spec.
var ErrSpec = errors.New("bad lab spec")

// ErrNoEtcd is returned by the etcd methods of a lab built without etcd.
var ErrNoEtcd = errors.New("lab has no etcd")

// ErrClosed is returned when hosts, pods or daemons are added to a closed lab.
var ErrClosed = errors.New("lab closed")

// HostSpec names one host and the LAN it sits on (LAN1 when empty).
type HostSpec struct {
	Name string
	LAN  string
}

// Spec describes a lab.
type Spec struct {
	Hosts []HostSpec
	// Prefix starts every namespace name (default "wb"); each name also gets a
	// random suffix.
	Prefix string
	// StateFile, when set, records what the lab made (namespaces, processes,
	// directories) so that Down can remove it from another process.
	StateFile string
	// EtcdBinary is the etcd to run (default "etcd" on PATH).
	EtcdBinary string
	// NoEtcd leaves etcd out (the router still joins the LANs).
	NoEtcd bool
	// NoRouter leaves the router (and so etcd) out: at most two hosts, both on LAN1,
	// their eth0s the two ends of one veth, without a default route.
	NoRouter bool
	// EtcdCluster runs etcd as a cluster of one member per host of Hosts (three
	// for a cluster that outlives a member), in the host's namespace on its eth0
	// address (clients on port 2379, peers on 2380, plain http), instead of one etcd
	// on the router. Hosts added later run none. See EtcdMembers and EtcdEndpoints.
	EtcdCluster bool
	// EtcdTLS serves etcd's clients over TLS only, and only to certificates of a CA
	// the lab makes (see Lab.EtcdTLS); the daemons the lab starts get the flags.
	EtcdTLS bool
}

// Host is one host namespace with eth0 on its LAN.
type Host struct {
	Name   string
	LAN    string
	NS     *netns.NS
	Addr   netip.Addr // eth0's address
	Router netip.Addr // default gateway (invalid without a router)
	index  int
	pods   int
}

// Lab is a built topology. Its methods are safe for concurrent use.
type Lab struct {
	spec   Spec
	log    *zap.Logger
	dir    string
	router *netns.NS
	etcd   *etcdproc.Server // the single etcd on the router
	// members is the etcd cluster (Spec.EtcdCluster), endpoints the client URLs
	// of etcd or of every member, tls the certificates of a TLS etcd (or nil).
	members   []EtcdMember
	endpoints []string
	tls       *EtcdTLS

	mu      sync.Mutex
	hosts   []*Host
	byName  map[string]*Host
	next    map[string]int // next host octet per LAN
	daemons []*Daemon
	pods    []*Pod
	nsExtra []*netns.NS
	closed  bool
}

// New builds the topology of spec: router and LAN bridges, hosts, etcd. More hosts
// can join later (AddHost). On error everything made so far is removed.
func New(ctx context.Context, spec Spec, log *zap.Logger) (*Lab, error) {
	l, err := build(ctx, spec, log)
	if err != nil {
		// l is what was made before the error: remove it.
		return nil, errors.Join(err, l.Close())
	}
	return l, nil
}

func build(ctx context.Context, spec Spec, log *zap.Logger) (l *Lab, err error) {
	if spec.Prefix == "" {
		spec.Prefix = "wb"
	}
	if spec.NoRouter {
		spec.NoEtcd = true
	}
	l = &Lab{spec: spec, log: log, byName: map[string]*Host{}, next: map[string]int{LAN1: 10, LAN2: 10}}
	if (spec.EtcdCluster || spec.EtcdTLS) && spec.NoEtcd {
		return l, fmt.Errorf("%w: an etcd cluster or TLS etcd in a lab without etcd", ErrSpec)
	}
	if spec.EtcdCluster && len(spec.Hosts) == 0 {
		return l, fmt.Errorf("%w: an etcd cluster needs hosts to run on", ErrSpec)
	}
	if l.dir, err = os.MkdirTemp("", "weft-lab-"); err != nil {
		return l, fmt.Errorf("lab dir: %w", err)
	}
	if !spec.NoRouter {
		if err = l.buildRouter(ctx); err != nil {
			return l, err
		}
	}
	for _, hs := range spec.Hosts {
		if _, err = l.AddHost(ctx, hs); err != nil {
			return l, err
		}
	}
	if !spec.NoEtcd {
		if err = l.startEtcd(ctx); err != nil {
			return l, err
		}
		l.saveState()
	}
	log.Debug("lab up", zap.Int("hosts", len(l.hosts)), zap.Bool("router", l.router != nil), zap.Strings("etcd", l.endpoints))
	return l, nil
}

func (l *Lab) buildRouter(ctx context.Context) error {
	r, err := netns.New(l.spec.Prefix + "-router")
	if err != nil {
		return fmt.Errorf("router netns: %w", err)
	}
	l.router = r
	l.saveState()
	return runAll(ctx, r, [][]string{
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"ip", "link", "add", "br1", "type", "bridge"},
		{"ip", "link", "add", "br2", "type", "bridge"},
		{"ip", "addr", "add", "192.0.2.1/24", "dev", "br1"},
		{"ip", "addr", "add", "198.51.100.1/24", "dev", "br2"},
		{"ip", "link", "set", "br1", "up"},
		{"ip", "link", "set", "br2", "up"},
	})
}

// AddHost makes a host on hs.LAN (LAN1 when empty) with the next free address of
// that LAN (.10, .11, ...), a default route via the router and forwarding on.
func (l *Lab) AddHost(ctx context.Context, hs HostSpec) (*Host, error) {
	if hs.LAN == "" {
		hs.LAN = LAN1
	}
	lan, br := lan1Net, "br1"
	switch hs.LAN {
	case LAN1:
	case LAN2:
		lan, br = lan2Net, "br2"
	default:
		return nil, fmt.Errorf("%w: host %s: LAN %q is neither %s nor %s", ErrSpec, hs.Name, hs.LAN, LAN1, LAN2)
	}
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		return nil, ErrClosed
	case hs.Name == "" || l.byName[hs.Name] != nil:
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: host %d: name %q empty or repeated", ErrSpec, len(l.hosts), hs.Name)
	case l.spec.NoRouter && (hs.LAN != LAN1 || len(l.hosts) >= 2):
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: host %s: a lab without router has at most two hosts, on %s", ErrSpec, hs.Name, LAN1)
	case l.next[hs.LAN] > 254:
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: too many hosts on %s", ErrSpec, hs.LAN)
	}
	a4 := lan.Addr().As4()
	a4[3] = byte(l.next[hs.LAN])
	l.next[hs.LAN]++
	h := &Host{Name: hs.Name, LAN: hs.LAN, Addr: netip.AddrFrom4(a4), index: len(l.hosts)}
	if !l.spec.NoRouter {
		h.Router = lan.Addr().Next()
	}
	l.hosts = append(l.hosts, h)
	l.byName[h.Name] = h
	l.mu.Unlock()

	ns, err := netns.New(l.spec.Prefix + "-" + hs.Name)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", hs.Name, err)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errors.Join(ErrClosed, ns.Close())
	}
	h.NS = ns
	l.nsExtra = append(l.nsExtra, ns)
	l.mu.Unlock()
	l.saveState()
	if l.spec.NoRouter {
		return h, l.wire(ctx, h)
	}
	port := fmt.Sprintf("p%d", h.index)
	if err := netns.Veth(ns, "eth0", l.router, port); err != nil {
		return nil, fmt.Errorf("host %s: veth: %w", hs.Name, err)
	}
	if err := runAll(ctx, l.router, [][]string{{"ip", "link", "set", port, "master", br}}); err != nil {
		return nil, fmt.Errorf("host %s: %w", hs.Name, err)
	}
	err = runAll(ctx, ns, [][]string{
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"ip", "addr", "add", h.Addr.String() + "/24", "dev", "eth0"},
		{"ip", "route", "add", "default", "via", h.Router.String()},
	})
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", hs.Name, err)
	}
	return h, nil
}

// wire joins the second host of a lab without router to the first: one veth, eth0
// at both ends, each with its address.
func (l *Lab) wire(ctx context.Context, h *Host) error {
	if h.index == 0 {
		return runAll(ctx, h.NS, [][]string{{"sysctl", "-qw", "net.ipv4.ip_forward=1"}})
	}
	first := l.hosts[0]
	if err := netns.Veth(first.NS, "eth0", h.NS, "eth0"); err != nil {
		return fmt.Errorf("host %s: veth: %w", h.Name, err)
	}
	for _, x := range []*Host{first, h} {
		err := runAll(ctx, x.NS, [][]string{
			{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
			{"ip", "addr", "add", x.Addr.String() + "/24", "dev", "eth0"},
		})
		if err != nil {
			return fmt.Errorf("host %s: %w", x.Name, err)
		}
	}
	return nil
}

func runAll(ctx context.Context, ns *netns.NS, cmds [][]string) error {
	for _, c := range cmds {
		if _, err := ns.Run(ctx, c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// Hosts returns the hosts in the order they were made (Spec order first).
func (l *Lab) Hosts() []*Host {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Host(nil), l.hosts...)
}

// Host returns the host of that name, or nil.
func (l *Lab) Host(name string) *Host {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byName[name]
}

// Router returns the router namespace (LAN bridges br1 and br2, etcd), or nil
// without a router.
func (l *Lab) Router() *netns.NS { return l.router }

// Etcd returns the lab's etcd server (to stop and restart it), or nil without etcd
// or with an etcd cluster (see EtcdMembers).
func (l *Lab) Etcd() *etcdproc.Server { return l.etcd }

// Daemons returns every daemon started in the lab, stopped ones included.
func (l *Lab) Daemons() []*Daemon {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Daemon(nil), l.daemons...)
}

// Dir is the lab's temporary directory (daemon files and logs, etcd data).
func (l *Lab) Dir() string { return l.dir }

// Close stops every daemon and removes every namespace, process and directory the
// lab made. It is safe to call more than once; it returns the first error.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	daemons, pods, extra := l.daemons, l.pods, l.nsExtra
	l.mu.Unlock()
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, d := range daemons {
		keep(d.Stop())
	}
	for i := len(pods) - 1; i >= 0; i-- {
		keep(pods[i].remove())
	}
	// A cluster's members run in the hosts' namespaces: stop them first.
	for _, m := range l.members {
		m.Server.Close()
	}
	for _, ns := range extra {
		keep(ns.Close())
	}
	if l.etcd != nil {
		l.etcd.Close()
	}
	if l.router != nil {
		keep(l.router.Close())
	}
	if l.dir != "" {
		keep(os.RemoveAll(l.dir))
	}
	if l.spec.StateFile != "" {
		if err := os.Remove(l.spec.StateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			keep(err)
		}
	}
	return first
}
