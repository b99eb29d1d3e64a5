package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/lease"
)

// WireGuardRefDev is the device WireGuardGo's wireguard-go makes on each host.
const WireGuardRefDev = "wgr0"

// WireGuardPort is the UDP port of the reference devices (flanneld's ListenPort).
const WireGuardPort = 51820

// wireGuardMTU is flanneld's for WireGuard: 80 bytes less than the underlay's 1500.
const wireGuardMTU = 1500 - 80

// ErrWireGuardHosts is returned when WireGuardGo is not given exactly two hosts.
var ErrWireGuardHosts = errors.New("wireguard-go reference: needs exactly two hosts")

// WireGuardDir is h's own directory for WireGuard (the lab's hosts share one file
// system): its private key and, in sock/, its UAPI sockets. It is made on first use
// and goes with the lab's directory.
func (l *Lab) WireGuardDir(h *Host) (string, error) {
	d := filepath.Join(l.dir, "wg-"+h.Name)
	if err := os.MkdirAll(filepath.Join(d, "sock"), 0o755); err != nil {
		return "", fmt.Errorf("wireguard dir of %s: %w", h.Name, err)
	}
	return d, nil
}

// WireGuardEnv is the environment that gives weftd on h a key file and a UAPI socket
// directory of its own, in WireGuardDir(h).
func (l *Lab) WireGuardEnv(h *Host) ([]string, error) {
	d, err := l.WireGuardDir(h)
	if err != nil {
		return nil, err
	}
	return []string{"WIREGUARD_KEY_FILE=" + filepath.Join(d, "wgkey"), "WEFT_WG_SOCKET_DIR=" + filepath.Join(d, "sock")}, nil
}

// wgToolArgs wraps a WireGuard tool's command line (wireguard-go, wg), which only
// knows /var/run/wireguard for UAPI sockets, so that it runs in a mount namespace of
// its own over a private /run with sockDir bound at /run/wireguard: the machine's
// /run is left alone and each host has its own sockets.
func wgToolArgs(sockDir string, args ...string) []string {
	const script = `mount -t tmpfs weft-wg /run && mkdir /run/wireguard && mount --bind "$0" /run/wireguard && exec "$@"`
	return append([]string{"unshare", "-m", "sh", "-c", script, sockDir}, args...)
}

// WireGuardGo joins two hosts the way flanneld's wireguard backend would, by hand
// with Debian's tools: on each host wireguard-go runs device WireGuardRefDev (MTU
// 1420), configured with `wg set` (a fresh key, listen port WireGuardPort, the other
// host as its one peer, whose AllowedIPs are its RefSubnet), holding its RefSubnet's
// first address as /32 with a route to the other's subnet. It is the reference for
// weftd's userspace WireGuard: the same engine, run as its authors ship it. It
// returns the hosts' subnet.env equivalents and the two wireguard-go processes
// (stopped by the lab's Close; the device goes with its process).
func (l *Lab) WireGuardGo(ctx context.Context, hosts []*Host) ([]lease.SubnetEnv, []*Daemon, error) {
	if len(hosts) != 2 {
		return nil, nil, fmt.Errorf("%w: got %d", ErrWireGuardHosts, len(hosts))
	}
	keys := make([]wgtypes.Key, 2)
	dirs := make([]string, 2)
	for i, h := range hosts {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return nil, nil, fmt.Errorf("wireguard-go reference: %w", err)
		}
		keys[i] = k
		if dirs[i], err = l.WireGuardDir(h); err != nil {
			return nil, nil, err
		}
		if err := os.WriteFile(filepath.Join(dirs[i], "wgkey"), []byte(k.String()+"\n"), 0o600); err != nil {
			return nil, nil, fmt.Errorf("wireguard-go reference: %w", err)
		}
	}
	envs := make([]lease.SubnetEnv, 2)
	procs := make([]*Daemon, 2)
	port := strconv.Itoa(WireGuardPort)
	for i, h := range hosts {
		o := hosts[1-i]
		sock := filepath.Join(dirs[i], "sock")
		envs[i] = refEnv(h, wireGuardMTU)
		args := wgToolArgs(sock, "wireguard-go", "-f", WireGuardRefDev)
		d, err := l.Start(ctx, h, DaemonSpec{Binary: args[0], Bare: true, Args: args[1:],
			Env: []string{"WG_PROCESS_FOREGROUND=1"}})
		if err != nil {
			return nil, nil, fmt.Errorf("wireguard-go on %s: %w", h.Name, err)
		}
		procs[i] = d
		if err := d.waitFile(ctx, filepath.Join(sock, WireGuardRefDev+".sock"), 10*time.Second); err != nil {
			return nil, nil, fmt.Errorf("wireguard-go on %s: %w", h.Name, err)
		}
		err = runAll(ctx, h.NS, [][]string{
			wgToolArgs(sock, "wg", "set", WireGuardRefDev, "private-key", filepath.Join(dirs[i], "wgkey"),
				"listen-port", port, "peer", keys[1-i].PublicKey().String(),
				"endpoint", o.Addr.String()+":"+port, "allowed-ips", RefSubnet(o).String()),
			{"ip", "link", "set", WireGuardRefDev, "mtu", strconv.Itoa(wireGuardMTU)},
			{"ip", "addr", "add", RefSubnet(h).Addr().String() + "/32", "dev", WireGuardRefDev},
			{"ip", "link", "set", WireGuardRefDev, "up"},
			{"ip", "route", "add", RefSubnet(o).String(), "dev", WireGuardRefDev},
		})
		if err != nil {
			return nil, nil, fmt.Errorf("wireguard-go on %s: %w\n%s", h.Name, err, d.LogTail(10))
		}
	}
	return envs, procs, nil
}

// waitFile waits until path exists, failing early with the log's tail when the
// daemon exits.
func (d *Daemon) waitFile(ctx context.Context, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-d.done:
			return fmt.Errorf("%w (log %s)\n%s", d.err, d.LogPath, d.LogTail(15))
		case <-ctx.Done():
			return fmt.Errorf("no %s: %w (log %s)\n%s", path, ctx.Err(), d.LogPath, d.LogTail(15))
		case <-tick.C:
		}
	}
}
