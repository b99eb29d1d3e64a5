package lab

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/weftnet/weft/lease"
)

// SocatDev is the TUN device SocatTunnel's socat opens on each host.
const SocatDev = "sc0"

// SocatPort is the UDP port the two socats exchange packets on (flannel's udp port).
const SocatPort = 8285

// socatMTU leaves room for the outer IPv4 and UDP headers on the 1500-byte underlay,
// as flannel's udp backend does.
const socatMTU = 1500 - 28

// ErrSocatHosts is returned when SocatTunnel is not given exactly two hosts.
var ErrSocatHosts = errors.New("socat tunnel: needs exactly two hosts")

// SocatTunnel joins two hosts with the simplest userspace TUN-to-UDP forwarder there
// is: one socat process per host (C, one thread, a select loop, no offloads) moving
// each packet read from its TUN device SocatDev as one UDP datagram to the other host,
// and each datagram it receives into the TUN device, which is flannel's udp wire
// format. It gives the lab a floor for userspace forwarding on this machine: what any
// TUN and UDP daemon pays before doing anything clever. Each host gets a RefSubnet and
// a route to the other's via SocatDev. It returns the hosts' subnet.env equivalents
// and the two socat processes (stopped by the lab's Close).
func (l *Lab) SocatTunnel(ctx context.Context, hosts []*Host) ([]lease.SubnetEnv, []*Daemon, error) {
	if len(hosts) != 2 {
		return nil, nil, fmt.Errorf("%w: got %d", ErrSocatHosts, len(hosts))
	}
	envs := make([]lease.SubnetEnv, 2)
	procs := make([]*Daemon, 2)
	port := strconv.Itoa(SocatPort)
	for i, h := range hosts {
		o := hosts[1-i]
		envs[i] = refEnv(h, socatMTU)
		d, err := l.Start(ctx, h, DaemonSpec{Binary: "socat", Bare: true, Args: []string{
			"-b", "65536",
			"TUN:" + RefSubnet(h).Addr().String() + "/32,tun-type=tun,iff-no-pi,iff-up,tun-name=" + SocatDev,
			// Unconnected: a datagram sent before the peer listens draws an ICMP
			// port unreachable, which would end a connected socat.
			"UDP-DATAGRAM:" + o.Addr.String() + ":" + port + ",bind=" + h.Addr.String() + ":" + port,
		}})
		if err != nil {
			return nil, nil, fmt.Errorf("socat tunnel on %s: %w", h.Name, err)
		}
		procs[i] = d
		if err := d.waitLink(ctx, SocatDev, 10*time.Second); err != nil {
			return nil, nil, fmt.Errorf("socat tunnel on %s: %w", h.Name, err)
		}
		err = runAll(ctx, h.NS, [][]string{
			{"ip", "link", "set", SocatDev, "mtu", strconv.Itoa(socatMTU)},
			{"ip", "route", "add", RefSubnet(o).String(), "dev", SocatDev},
		})
		if err != nil {
			return nil, nil, fmt.Errorf("socat tunnel on %s: %w", h.Name, err)
		}
	}
	return envs, procs, nil
}

// waitLink waits until the daemon's host has a link called name, failing early with
// the log's tail when the daemon exits.
func (d *Daemon) waitLink(ctx context.Context, name string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := d.Host.NS.Run(ctx, "ip", "link", "show", "dev", name); err == nil {
			return nil
		}
		select {
		case <-d.done:
			return fmt.Errorf("%w (log %s)\n%s", d.err, d.LogPath, d.LogTail(15))
		case <-ctx.Done():
			return fmt.Errorf("no link %s: %w (log %s)\n%s", name, ctx.Err(), d.LogPath, d.LogTail(15))
		case <-tick.C:
		}
	}
}
