package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/lease"
)

// Kinds of subjects.
const (
	KindReference = "reference" // made by the benchmark with plain kernel features
	KindWeft      = "weft"
	KindDaemon    = "daemon" // another flanneld-compatible daemon (--daemon)
)

// Reference subject names; ratios are taken to the first two.
const (
	Underlay     = "underlay"
	KernelVXLAN  = "kernel-vxlan"
	KernelHostGW = "kernel-host-gw"
	// SocatUDP is the floor of userspace forwarding: a socat process per host moving
	// packets between a TUN device and a UDP socket (lab.SocatTunnel).
	SocatUDP = "socat-udp"
	// WireGuardGo is userspace WireGuard as its authors ship it: Debian's wireguard-go
	// and wg configured by hand on each host (lab.WireGuardGo), the reference of the
	// weftd-wireguard row.
	WireGuardGo = "wireguard-go"
)

// WeftdWireGuard is weftd's wireguard backend with its device in userspace (the
// wireguard-go engine inside weftd), whether or not the kernel has WireGuard.
const WeftdWireGuard = "weftd-wireguard"

// Subject is one row of the matrix: a way of carrying pod traffic between two hosts.
type Subject struct {
	Name    string
	Kind    string
	Binary  string // daemon subjects: weftd or a flanneld-compatible daemon
	Backend string // daemon subjects: network config Backend.Type
	// Options are more members of the Backend object (JSON without braces).
	Options string
}

// BusyPollWindow is the udp backend's BusyPoll of the weftd-udp-busy subject: longer
// than the gap between the pings of a run, so every ping finds the workers awake.
const BusyPollWindow = "50ms"

// Subjects returns the standard rows (references, weftd's four backends) and one
// udp row per extra daemon (name -> binary, in the order given).
func Subjects(weftd string, extra [][2]string) []Subject {
	s := []Subject{
		{Name: Underlay, Kind: KindReference},
		{Name: KernelVXLAN, Kind: KindReference},
		{Name: KernelHostGW, Kind: KindReference},
		{Name: SocatUDP, Kind: KindReference},
		{Name: WireGuardGo, Kind: KindReference},
		{Name: "weftd-udp", Kind: KindWeft, Binary: weftd, Backend: "udp"},
		{Name: "weftd-udp-busy", Kind: KindWeft, Binary: weftd, Backend: "udp", Options: `"BusyPoll":"` + BusyPollWindow + `"`},
		{Name: "weftd-vxlan", Kind: KindWeft, Binary: weftd, Backend: "vxlan"},
		{Name: "weftd-host-gw", Kind: KindWeft, Binary: weftd, Backend: "host-gw"},
		{Name: WeftdWireGuard, Kind: KindWeft, Binary: weftd, Backend: "wireguard", Options: `"Device":"userspace"`},
	}
	for _, e := range extra {
		s = append(s, Subject{Name: e[0], Kind: KindDaemon, Binary: e[1], Backend: "udp"})
	}
	return s
}

// HostSpecs names the two LAN1 hosts of each subject: <name>-a and <name>-b.
func HostSpecs(subjects []Subject) []lab.HostSpec {
	var hs []lab.HostSpec
	for _, s := range subjects {
		hs = append(hs, lab.HostSpec{Name: s.Name + "-a"}, lab.HostSpec{Name: s.Name + "-b"})
	}
	return hs
}

// NotApplicable says why the subject cannot carry family (4 or 6), or "" when it can.
func (s Subject) NotApplicable(family int) string {
	if family == 6 && s.Kind == KindDaemon && s.Backend == "udp" {
		return "IPv4-only: flannel's udp backend carries no IPv6"
	}
	if family == 6 && s.Name == SocatUDP {
		return "IPv4-only: the lab sets the socat reference up for IPv4"
	}
	if family == 6 && s.Name == WireGuardGo {
		return "IPv4-only: the lab sets the wireguard-go reference up for IPv4"
	}
	return ""
}

// Setup configures the subject on its two hosts in l and returns the path its
// workloads use: pod to pod (host to host for the underlay). Each daemon subject
// has its own etcd prefix, so every subject can stay up side by side. With family 6
// the hosts get IPv6 underlay addresses, daemons an IPv6-only network and the
// references their IPv6 forms, and the path runs over IPv6 alone.
func (s Subject) Setup(ctx context.Context, l *lab.Lab, family int) (Path, error) {
	a, b := l.Host(s.Name+"-a"), l.Host(s.Name+"-b")
	if a == nil || b == nil {
		return Path{}, fmt.Errorf("subject %s: hosts missing from the lab", s.Name)
	}
	v6 := family == 6
	if v6 {
		for _, h := range []*lab.Host{a, b} {
			if err := l.EnableIPv6(ctx, h); err != nil {
				return Path{}, fmt.Errorf("subject %s: %w", s.Name, err)
			}
		}
	}
	if s.Name == Underlay {
		p := Path{Client: a.NS, Server: b.NS, Addr: b.Addr}
		if v6 {
			p.Addr = lab.HostAddr6(b)
		}
		return p, nil
	}
	var envs []lease.SubnetEnv
	var daemons []*lab.Daemon
	var err error
	hosts := []*lab.Host{a, b}
	switch {
	case s.Name == KernelVXLAN && v6:
		envs, err = l.KernelVXLAN6(ctx, hosts)
	case s.Name == KernelVXLAN:
		envs, err = l.KernelVXLAN(ctx, hosts)
	case s.Name == KernelHostGW && v6:
		envs, err = l.KernelHostGW6(ctx, hosts)
	case s.Name == KernelHostGW:
		envs, err = l.KernelHostGW(ctx, hosts)
	case s.Name == SocatUDP:
		envs, daemons, err = l.SocatTunnel(ctx, hosts)
	case s.Name == WireGuardGo:
		envs, daemons, err = l.WireGuardGo(ctx, hosts)
	case s.Binary != "":
		envs, daemons, err = s.startDaemons(ctx, l, hosts, v6)
	default:
		return Path{}, fmt.Errorf("subject %s: unknown reference and no binary", s.Name)
	}
	if err != nil {
		return Path{}, fmt.Errorf("subject %s: %w", s.Name, err)
	}
	pa, err := l.AttachPod(ctx, a, envs[0])
	if err != nil {
		return Path{}, fmt.Errorf("subject %s: %w", s.Name, err)
	}
	pb, err := l.AttachPod(ctx, b, envs[1])
	if err != nil {
		return Path{}, fmt.Errorf("subject %s: %w", s.Name, err)
	}
	p := Path{Client: pa.NS, Server: pb.NS, Addr: pb.Addr, Daemons: daemons}
	if v6 != pb.Addr.Is6() {
		return Path{}, fmt.Errorf("subject %s: pod address %v is not of IPv%d", s.Name, pb.Addr, family)
	}
	// Daemons learn each other's lease through etcd's watch: wait for the path.
	if err := WaitPing(ctx, p.Client, p.Addr, 20*time.Second); err != nil {
		for _, d := range daemons {
			err = fmt.Errorf("%w\n%s log tail:\n%s", err, d.Host.Name, d.LogTail(8))
		}
		return Path{}, fmt.Errorf("subject %s: pod to pod: %w", s.Name, err)
	}
	return p, nil
}

// startDaemons starts the subject's daemon on each host with a network config of its
// own (backend options, family) and returns their subnet.env.
func (s Subject) startDaemons(ctx context.Context, l *lab.Lab, hosts []*lab.Host, v6 bool) ([]lease.SubnetEnv, []*lab.Daemon, error) {
	prefix := "/weft-bench/" + s.Name
	bt := s.Backend
	if s.Options != "" || v6 {
		cfg := lab.NetworkConfigWith(s.Backend, s.Options)
		if v6 {
			cfg = lab.NetworkConfigV6With(s.Backend, s.Options)
		}
		if err := l.SetConfig(ctx, prefix, cfg); err != nil {
			return nil, nil, err
		}
		bt = "" // set above, with the options and family
	}
	var daemons []*lab.Daemon
	for _, h := range hosts {
		spec := lab.DaemonSpec{Binary: s.Binary, Backend: bt, Weft: s.Kind == KindWeft, Args: []string{"--etcd-prefix=" + prefix}}
		if s.Backend == "wireguard" {
			// The hosts share one file system: a key and UAPI sockets of their own.
			var err error
			if spec.Env, err = l.WireGuardEnv(h); err != nil {
				return nil, nil, err
			}
		}
		d, err := l.Start(ctx, h, spec)
		if err != nil {
			return nil, nil, err
		}
		daemons = append(daemons, d)
		if s.Kind != KindWeft {
			// One at a time: flanneld's etcd v3 registry does not retry when another
			// daemon created the subnet it picked at random in the same instant; it
			// exits with "failed to acquire lease: subnet already exists".
			if _, err := d.WaitSubnetEnv(ctx, 20*time.Second); err != nil {
				return nil, nil, err
			}
		}
	}
	var envs []lease.SubnetEnv
	for _, d := range daemons {
		env, err := d.WaitSubnetEnv(ctx, 20*time.Second)
		if err != nil {
			return nil, nil, err
		}
		envs = append(envs, env)
	}
	return envs, daemons, nil
}
