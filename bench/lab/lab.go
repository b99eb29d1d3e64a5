// Package lab builds a one-machine lab of network namespaces for weft's demo,
// benchmarks and end-to-end tests: hosts on one or two underlay LANs, a router
// between the LANs that also runs etcd, overlay daemons on the hosts and pod
// namespaces attached to each host's cni0 bridge as the CNI bridge plugin would.
package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"

	"go.uber.org/zap"

	"github.com/weftnet/weft/internal/etcdproc"
	"github.com/weftnet/weft/internal/netns"
	"github.com/weftnet/weft/lease"
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

// DefaultPrefix is flannel's etcd prefix, used unless a daemon is given another.
const DefaultPrefix = lease.DefaultPrefix

// EtcdEndpoint is where the lab's etcd listens, inside the router namespace; every
// host reaches it through its default route.
const EtcdEndpoint = "http://192.0.2.1:2379"

// ErrSpec is wrapped by errors about an invalid Spec.
var ErrSpec = errors.New("bad lab spec")

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
}

// Host is one host namespace with eth0 on its LAN.
type Host struct {
	Name   string
	LAN    string
	NS     *netns.NS
	Addr   netip.Addr // eth0's address
	Router netip.Addr // default gateway
	index  int
	pods   int
}

// Lab is a built topology. Its methods are safe for concurrent use.
type Lab struct {
	spec   Spec
	log    *zap.Logger
	dir    string
	router *netns.NS
	etcd   *etcdproc.Server
	hosts  []*Host
	byName map[string]*Host

	mu      sync.Mutex
	daemons []*Daemon
	pods    []*Pod
	nsExtra []*netns.NS
	closed  bool
}

// New builds the topology of spec: router and LAN bridges, hosts, etcd. On error
// everything made so far is removed.
func New(ctx context.Context, spec Spec, log *zap.Logger) (l *Lab, err error) {
	if spec.Prefix == "" {
		spec.Prefix = "wb"
	}
	if len(spec.Hosts) == 0 {
		return nil, fmt.Errorf("%w: no hosts", ErrSpec)
	}
	l = &Lab{spec: spec, log: log, byName: map[string]*Host{}}
	defer func() {
		if err != nil {
			l.Close()
			l = nil
		}
	}()
	if l.dir, err = os.MkdirTemp("", "weft-lab-"); err != nil {
		return nil, fmt.Errorf("lab dir: %w", err)
	}
	if err = l.buildRouter(ctx); err != nil {
		return nil, err
	}
	next := map[string]int{LAN1: 10, LAN2: 10}
	for i, hs := range spec.Hosts {
		if hs.LAN == "" {
			hs.LAN = LAN1
		}
		if hs.Name == "" || l.byName[hs.Name] != nil {
			return nil, fmt.Errorf("%w: host %d: name %q empty or repeated", ErrSpec, i, hs.Name)
		}
		var h *Host
		if h, err = l.addHost(ctx, i, hs, next[hs.LAN]); err != nil {
			return nil, err
		}
		next[hs.LAN]++
		l.hosts = append(l.hosts, h)
		l.byName[h.Name] = h
		l.saveState()
	}
	l.etcd, err = etcdproc.Start(ctx, etcdproc.Options{
		Binary: spec.EtcdBinary, Netns: l.router.Name, Host: "192.0.2.1", Port: 2379,
		Dir: l.dir + "/etcd",
	})
	if err != nil {
		return nil, fmt.Errorf("lab etcd: %w", err)
	}
	l.saveState()
	log.Debug("lab up", zap.Int("hosts", len(l.hosts)), zap.String("router", l.router.Name))
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

func (l *Lab) addHost(ctx context.Context, i int, hs HostSpec, octet int) (*Host, error) {
	lan, br := lan1Net, "br1"
	switch hs.LAN {
	case LAN1:
	case LAN2:
		lan, br = lan2Net, "br2"
	default:
		return nil, fmt.Errorf("%w: host %s: LAN %q is neither %s nor %s", ErrSpec, hs.Name, hs.LAN, LAN1, LAN2)
	}
	if octet > 254 {
		return nil, fmt.Errorf("%w: too many hosts on %s", ErrSpec, hs.LAN)
	}
	ns, err := netns.New(l.spec.Prefix + "-" + hs.Name)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", hs.Name, err)
	}
	a4 := lan.Addr().As4()
	a4[3] = byte(octet)
	h := &Host{Name: hs.Name, LAN: hs.LAN, NS: ns, Addr: netip.AddrFrom4(a4), Router: lan.Addr().Next(), index: i}
	l.mu.Lock()
	l.nsExtra = append(l.nsExtra, ns)
	l.mu.Unlock()
	port := fmt.Sprintf("p%d", i)
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

func runAll(ctx context.Context, ns *netns.NS, cmds [][]string) error {
	for _, c := range cmds {
		if _, err := ns.Run(ctx, c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// Hosts returns the hosts in Spec order.
func (l *Lab) Hosts() []*Host { return l.hosts }

// Host returns the host of that name, or nil.
func (l *Lab) Host(name string) *Host { return l.byName[name] }

// Router returns the router namespace (LAN bridges br1 and br2, etcd).
func (l *Lab) Router() *netns.NS { return l.router }

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
	for _, p := range pods {
		keep(p.NS.Close())
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
