package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
)

// restartPingWithin bounds the first ping through a restarted or remade device.
const restartPingWithin = 5 * time.Second

// WireGuard's own timers, which bound what a test may wait for: a handshake
// initiation without an answer is sent again after REKEY_TIMEOUT (5 s) plus up to
// 333 ms of jitter. The bounds below allow one lost initiation, with a stated margin.
const (
	wgHandshakeRetry = 5*time.Second + 333*time.Millisecond
	// wgKeyChangeWithin bounds the first ping after a peer's new key reached its
	// lease: our side adds the key and starts a handshake within weftd's kickDelay
	// (1 s); if that initiation crosses the peer's own, one retry; the ping waits 1 s
	// for its answer; 5 s of margin for a loaded machine.
	wgKeyChangeWithin = time.Second + wgHandshakeRetry + time.Second + 5*time.Second
)

// weftd hosts lease below 198.18.200.0 (SubnetMax): the stock WireGuard hosts' leases
// are written at 198.18.200.0/24 (wgStockSubnet), which a weftd that had picked it at
// random would lose and lease again, under the test's feet (1 run in about 250).
const wgConfig = `{"Network":"198.18.0.0/16","SubnetLen":24,"SubnetMax":"198.18.199.0","Backend":{"Type":"wireguard","PersistentKeepaliveInterval":5}}`

// wgDir is h's own directory for what WireGuard keeps per host (the lab's hosts share
// one file system): the private key and the UAPI sockets (lab.WireGuardDir).
func wgDir(c *cluster, h *host) string {
	c.t.Helper()
	d, err := c.lab.WireGuardDir(h.lh)
	if err != nil {
		c.t.Fatal(err)
	}
	return d
}

// startWG runs weftd on h with its key and UAPI sockets in wgDir(h).
func startWG(c *cluster, h *host) {
	c.t.Helper()
	c.run(h, lab.DaemonSpec{Binary: c.bin, Weft: true,
		Args: []string{"--etcd-api=" + c.api, "--healthz-ip=127.0.0.1", "--healthz-port=8475"},
		Env:  wgEnv(c, h)})
}

// wgEnv puts h's key and UAPI sockets in wgDir(h) (lab.WireGuardEnv).
func wgEnv(c *cluster, h *host) []string {
	c.t.Helper()
	env, err := c.lab.WireGuardEnv(h.lh)
	if err != nil {
		c.t.Fatal(err)
	}
	return env
}

// wgTool runs a WireGuard tool (wg, wireguard-go) inside h's namespace with h's
// socket directory where the tools look for it (/var/run/wireguard): in a mount
// namespace of its own, over a private /run, so the host's is left alone.
func wgTool(ctx context.Context, c *cluster, h *host, args ...string) *exec.Cmd {
	sock := filepath.Join(wgDir(c, h), "sock")
	script := "mount -t tmpfs weft-wg /run && mkdir /run/wireguard && mount --bind \"$0\" /run/wireguard && exec \"$@\""
	return h.ns.Command(ctx, "unshare", append([]string{"-m", "sh", "-c", script, sock}, args...)...)
}

func wgRun(c *cluster, h *host, args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := wgTool(ctx, c, h, args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s on %s: %v\n%s", strings.Join(args, " "), h.name, err, out)
	}
	return string(out)
}

// wgPeer is one peer line of `wg show <dev> dump`.
type wgPeer struct {
	key, endpoint, allowed string
	handshake              int64
}

func wgPeers(c *cluster, h *host, dev string) map[string]wgPeer {
	c.t.Helper()
	out := map[string]wgPeer{}
	lines := strings.Split(strings.TrimSpace(wgRun(c, h, "wg", "show", dev, "dump")), "\n")
	for _, l := range lines[1:] { // the first line is the interface's
		f := strings.Split(l, "\t")
		if len(f) < 8 {
			c.t.Fatalf("wg show dump on %s: %q", h.name, l)
		}
		hs, _ := strconv.ParseInt(f[4], 10, 64)
		out[f[0]] = wgPeer{key: f[0], endpoint: f[2], allowed: f[3], handshake: hs}
	}
	return out
}

// wgLeaseData is the BackendData weftd on h published.
func wgLeaseData(c *cluster, h *host) (key string, port int) {
	c.t.Helper()
	for _, l := range c.leases() {
		if l.attrs.PublicIP.String() == h.ip {
			if l.attrs.BackendType != "wireguard" {
				c.t.Fatalf("lease of %s: BackendType %q", h.name, l.attrs.BackendType)
			}
			var d struct {
				PublicKey string
				Port      int
			}
			if err := json.Unmarshal(l.attrs.BackendData, &d); err != nil || d.PublicKey == "" {
				c.t.Fatalf("BackendData %s of %s: %v", l.attrs.BackendData, h.name, err)
			}
			return d.PublicKey, d.Port
		}
	}
	c.t.Fatalf("no lease for %s", h.name)
	return "", 0
}

// waitHandshake waits until `wg show` on h lists peer with a handshake after since.
func waitHandshake(c *cluster, h *host, peer string, since int64) wgPeer {
	c.t.Helper()
	var p wgPeer
	eventually(c.t, 15*time.Second, func() error {
		var ok bool
		p, ok = wgPeers(c, h, "flannel-wg")[peer]
		if !ok || p.handshake <= since {
			return fmt.Errorf("wg show flannel-wg on %s: peer %s not there or no handshake after %d: %+v", h.name, peer, since, p)
		}
		return nil
	})
	return p
}

func wgCluster(t *testing.T) *cluster {
	testenv.NeedTools(t, "wg", "unshare", "iperf3")
	c := newCluster(t, "v3")
	c.putConfig(wgConfig)
	return c
}

// TestWireGuardBackend: two weftd hosts (one behind the router) carry pod traffic over
// WireGuard both ways, iperf3 included; `wg show` lists each one's peer with a
// handshake, and /metrics says which device runs.
func TestWireGuardBackend(t *testing.T) {
	c := wgCluster(t)
	a, b := c.addHost("a", "lan1"), c.addHost("b", "lan2")
	startWG(c, a)
	startWG(c, b)
	envA, envB := c.waitSubnetEnv(a), c.waitSubnetEnv(b)
	if envA.MTU != 1500-80 {
		t.Fatalf("FLANNEL_MTU %d, want %d (eth0's less flanneld's 80)", envA.MTU, 1500-80)
	}
	podA, podB := c.attachPod(a, envA), c.attachPod(b, envB)
	c.ping(a.pod, podB)
	c.ping(b.pod, podA)
	if bps := iperfTCP(t, a.pod, b.pod, podB, 2); bps <= 0 {
		t.Fatalf("iperf3 a->b: %v bit/s", bps)
	} else {
		t.Logf("wireguard backend, pod a -> pod b across the router: %.2f Gbit/s", bps/1e9)
	}

	keyA, portA := wgLeaseData(c, a)
	keyB, _ := wgLeaseData(c, b)
	if portA != 51820 {
		t.Fatalf("lease Port %d, want 51820", portA)
	}
	p := waitHandshake(c, a, keyB, 0)
	if p.endpoint != b.ip+":51820" || p.allowed != envB.Subnet.String() {
		t.Fatalf("peer b on a: %+v, want endpoint %s:51820 allowed-ips %v", p, b.ip, envB.Subnet)
	}
	waitHandshake(c, b, keyA, 0)

	// The device as flanneld sets it up: our subnet's first address as /32, the
	// network routed to it, MTU 1420.
	addr := c.sh(a.ns, "ip -4 -o addr show dev flannel-wg")
	if !strings.Contains(addr, envA.Subnet.Addr().String()+"/32") {
		t.Fatalf("flannel-wg address on a: %q", addr)
	}
	if r := routeTo(c, a, "198.18.0.0/16"); !strings.Contains(r, "dev flannel-wg") || !strings.Contains(r, "scope link") {
		t.Fatalf("route to the network on a: %q", r)
	}
	if link := c.sh(a.ns, "ip -o link show dev flannel-wg"); !strings.Contains(link, "mtu 1420") {
		t.Fatalf("flannel-wg on a: %q", link)
	}

	m := mustScrape(t, a)
	impl := "userspace"
	if strings.Contains(c.sh(a.ns, "ip -d -o link show dev flannel-wg"), "wireguard") {
		impl = "kernel"
	}
	if v := m.must(t, "weft_wireguard_device_info", "device", "flannel-wg", "implementation", impl); v != 1 {
		t.Fatalf("weft_wireguard_device_info{implementation=%s} = %v", impl, v)
	}
	if !strings.Contains(a.logs(), `"implementation": "`+impl+`"`) && !strings.Contains(a.logs(), `"implementation":"`+impl+`"`) {
		t.Fatalf("weftd's log does not say which device runs (%s)", impl)
	}

	// Stopped, weftd leaves its device (with its address and route, for the next
	// weftd) and removes its UAPI socket.
	c.stop(a)
	if out, err := a.ns.Run(context.Background(), "ip", "addr", "show", "flannel-wg"); err != nil || !strings.Contains(out, "inet ") {
		t.Fatalf("flannel-wg not left with its address on a after weftd stopped: %v %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(wgDir(c, a), "sock", "flannel-wg.sock")); !os.IsNotExist(err) {
		t.Fatalf("UAPI socket left after weftd stopped: %v", err)
	}
}

// TestWireGuardStockPeer: weftd and a host running Debian's wireguard-go and wg,
// configured by hand from weftd's lease as flanneld configures its device, with its
// own lease written in flannel's format: pods ping both ways, on an IPv4 network
// (flannel-wg) and an IPv6-only one (flannel-wg-v6 on ListenPortV6, over IPv6).
func TestWireGuardStockPeer(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "ipv4", true: "ipv6-only"}[v6], func(t *testing.T) { wgStockPeer(t, v6) })
	}
}

func wgStockPeer(t *testing.T, v6 bool) {
	testenv.NeedTools(t, "wireguard-go")
	c := wgCluster(t)
	a, b := c.addHost("a", "lan1"), c.addHost("b", "lan1")
	dev, port, network, subnetB := "flannel-wg", 51820, "198.18.0.0/16", netip.MustParsePrefix("198.18.200.0/24")
	epA, pubIPB := a.ip, b.ip
	if v6 {
		c.putConfig(`{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"wireguard"}}`)
		dev, port, network, subnetB = "flannel-wg-v6", 51821, "fd00:db8::/48", netip.MustParsePrefix("fd00:db8:0:c8::/64")
		for _, h := range []*host{a, b} {
			if err := c.lab.EnableIPv6(context.Background(), h.lh); err != nil {
				t.Fatal(err)
			}
		}
		epA, pubIPB = "["+lab.HostAddr6(a.lh).String()+"]", lab.HostAddr6(b.lh).String()
	}
	startWG(c, a)
	envA := c.waitSubnetEnv(a)
	podA := c.attachPod(a, envA)
	snA := envA.Subnet
	la := wgLeaseAttrs(c, a)
	keyA, portA := wgData(c, la.BackendData)
	if v6 {
		snA = envA.IPv6Subnet
		keyA, portA = wgData(c, la.BackendV6Data)
	}
	if portA != port {
		t.Fatalf("a's lease: Port %d, want %d", portA, port)
	}

	// The stock host: key, device, address, route, peer, as flanneld's backend makes them.
	dirB := wgDir(c, b)
	keyFile := filepath.Join(dirB, "wgkey")
	c.sh(b.ns, "umask 077 && wg genkey > "+keyFile)
	pubB := strings.TrimSpace(c.sh(b.ns, "wg pubkey < "+keyFile))

	ctx, stopWG := context.WithCancel(context.Background())
	wgo := wgTool(ctx, c, b, "wireguard-go", "-f", dev)
	wgo.Env = append(os.Environ(), "WG_PROCESS_FOREGROUND=1")
	logPath := filepath.Join(dirB, "wireguard-go.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	wgo.Stdout, wgo.Stderr = logf, logf
	wgo.Cancel = func() error { return wgo.Process.Signal(syscall.SIGTERM) }
	if err := wgo.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopWG()
		_ = wgo.Wait()
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			t.Logf("wireguard-go on b:\n%s", log)
		}
	})
	eventually(t, 10*time.Second, func() error {
		if _, err := os.Stat(filepath.Join(dirB, "sock", dev+".sock")); err != nil {
			return fmt.Errorf("wireguard-go's UAPI socket: %w", err)
		}
		return nil
	})
	wgRun(c, b, "wg", "set", dev, "private-key", keyFile, "listen-port", strconv.Itoa(port),
		"peer", keyA, "endpoint", fmt.Sprintf("%s:%d", epA, portA), "allowed-ips", snA.String())
	c.sh(b.ns, fmt.Sprintf("ip link set %[1]s mtu 1420 && ip addr add %[2]s/%[3]d dev %[1]s && "+
		"ip link set %[1]s up && ip route replace %[4]s dev %[1]s scope link", dev, subnetB.Addr(), subnetB.Addr().BitLen(), network))

	// Its lease, as flanneld writes it.
	data := map[string]any{"PublicKey": pubB, "Port": port}
	attrs := map[string]any{"PublicIP": pubIPB, "PublicIPv6": nil, "BackendType": "wireguard", "BackendData": data}
	key := lease.SubnetKey(subnetB)
	if v6 {
		attrs = map[string]any{"PublicIP": "0.0.0.0", "PublicIPv6": pubIPB, "BackendType": "wireguard", "BackendData": nil, "BackendV6Data": data}
		key = lease.LeaseKey(netip.Prefix{}, subnetB)
	}
	val, _ := json.Marshal(attrs)
	cli := c.etcdClient()
	pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	grant, err := cli.Grant(pctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(pctx, prefix+"/subnets/"+key, string(val), clientv3.WithLease(grant.ID)); err != nil {
		t.Fatal(err)
	}

	envB := lease.SubnetEnv{Network: netip.MustParsePrefix(network), Subnet: subnetB, MTU: 1420}
	if v6 {
		envB = lease.SubnetEnv{IPv6Network: netip.MustParsePrefix(network), IPv6Subnet: subnetB, MTU: 1420}
	}
	podB := c.attachPod(b, envB)
	c.ping(a.pod, podB)
	c.ping(b.pod, podA)
	eventually(t, 15*time.Second, func() error {
		if p := wgPeers(c, a, dev)[pubB]; p.handshake == 0 || p.endpoint != netip.AddrPortFrom(netip.MustParseAddr(pubIPB), uint16(port)).String() {
			return fmt.Errorf("peer b on a's %s: %+v", dev, p)
		}
		return nil
	})
	if p := wgPeers(c, b, dev)[keyA]; p.allowed != snA.String() || p.handshake == 0 {
		t.Fatalf("peer a on the stock host: %+v", p)
	}
}

// TestWireGuardKeyPersists: weftd restarted keeps its private key (the lease shows the
// same public key) and its peer makes a new handshake with it. Without persistent
// keepalive, so that only the restarted device's own handshake initiation can end
// the peer's session with the old one within restartPingWithin.
func TestWireGuardKeyPersists(t *testing.T) {
	c := wgCluster(t)
	c.putConfig(strings.Replace(wgConfig, `,"PersistentKeepaliveInterval":5`, "", 1))
	a, b := c.addHost("a", "lan1"), c.addHost("b", "lan1")
	startWG(c, a)
	startWG(c, b)
	envA, envB := c.waitSubnetEnv(a), c.waitSubnetEnv(b)
	podA, podB := c.attachPod(a, envA), c.attachPod(b, envB)
	c.ping(a.pod, podB)
	keyA, _ := wgLeaseData(c, a)
	before := waitHandshake(c, b, keyA, 0)
	fileBefore, err := os.ReadFile(filepath.Join(wgDir(c, a), "wgkey"))
	if err != nil {
		t.Fatal(err)
	}

	c.stop(a)
	restarted := time.Now()
	startWG(c, a)
	if env := c.waitSubnetEnv(a); env.Subnet != envA.Subnet {
		t.Fatalf("subnet changed across restart: %v -> %v", envA.Subnet, env.Subnet)
	}
	if k, _ := wgLeaseData(c, a); k != keyA {
		t.Fatalf("public key changed across restart: %s -> %s", keyA, k)
	}
	fileAfter, err := os.ReadFile(filepath.Join(wgDir(c, a), "wgkey"))
	if err != nil || string(fileAfter) != string(fileBefore) {
		t.Fatalf("key file changed across restart (%v)", err)
	}
	// wg genkey's format: base64 and a newline, readable by wg pubkey.
	if pub := strings.TrimSpace(c.sh(a.ns, "wg pubkey < "+filepath.Join(wgDir(c, a), "wgkey"))); pub != keyA {
		t.Fatalf("wg pubkey of the key file: %s, lease has %s", pub, keyA)
	}
	// b still has a session with a's old device and would send on it, unanswered,
	// until WireGuard's timers start over (keepalive 10 s + rekey 5 s): b pings first,
	// and gets through within restartPingWithin of the start (weftd's start included)
	// only because a's new device sends b a handshake initiation as soon as it has b
	// as a peer.
	for _, p := range []struct {
		from *netns.NS
		to   string
	}{{b.pod, podA}, {a.pod, podB}} {
		eventually(t, restartPingWithin, func() error {
			out, err := p.from.Run(context.Background(), "ping", "-c", "1", "-W", "1", p.to)
			if err != nil {
				return fmt.Errorf("ping %s from %s after the restart: %v: %s", p.to, p.from.Name, err, out)
			}
			return nil
		})
		t.Logf("first ping %s -> %s %v after weftd on a was started again", p.from.Name, p.to, time.Since(restarted).Round(time.Millisecond))
	}
	// a's device is new: a handshake there means b took a's key as the one it had. (b's
	// own record of the handshake only counts seconds and may not move.)
	keyB, _ := wgLeaseData(c, b)
	waitHandshake(c, a, keyB, 0)
	if p := waitHandshake(c, b, keyA, before.handshake-1); p.endpoint != a.ip+":51820" {
		t.Fatalf("peer a on b after the restart: %+v", p)
	}
}
