package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
)

// stockWGSpec is what a stock WireGuard host (Debian's wireguard-go and wg) is
// configured with, by hand, as flanneld's wireguard backend configures its device.
type stockWGSpec struct {
	Dev          string       // the device, flannel-wg
	Port         int          // its listen port
	PeerKey      string       // weftd's public key (base64, from its lease)
	PeerEndpoint string       // weftd's host:port
	PeerAllowed  netip.Prefix // weftd's subnet
	Subnet       netip.Prefix // the stock host's own subnet
	Network      netip.Prefix // the flannel network, routed to the device
}

// stockWG is wireguard-go running on a lab host, stopped (SIGTERM, awaited) at the
// test's cleanup, its log shown when the test failed.
type stockWG struct {
	h    *host
	spec stockWGSpec
	key  string // its public key (base64)
	sock string // its UAPI socket
}

// startStockWG runs wireguard-go on h in h's namespace (wgTool) and configures it
// from spec with a fresh key: `wg set` for key, port and peer, `ip` for MTU 1420,
// the subnet's first address, and the network's route.
func startStockWG(c *cluster, h *host, spec stockWGSpec) *stockWG {
	t := c.t
	t.Helper()
	testenv.NeedTools(t, "wireguard-go", "wg", "unshare")
	dir := wgDir(c, h)
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "wgkey")
	if err := os.WriteFile(keyFile, []byte(k.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &stockWG{h: h, spec: spec, key: k.PublicKey().String(), sock: filepath.Join(dir, "sock", spec.Dev+".sock")}

	ctx, stop := context.WithCancel(context.Background())
	wgo := wgTool(ctx, c, h, "wireguard-go", "-f", spec.Dev)
	wgo.Env = append(os.Environ(), "WG_PROCESS_FOREGROUND=1")
	logPath := filepath.Join(dir, "wireguard-go.log")
	logf, err := os.Create(logPath)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	wgo.Stdout, wgo.Stderr = logf, logf
	wgo.Cancel = func() error { return wgo.Process.Signal(syscall.SIGTERM) }
	if err := wgo.Start(); err != nil {
		stop()
		logf.Close()
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- wgo.Wait() }()
	t.Cleanup(func() {
		stop()
		<-exited
		logf.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			t.Logf("wireguard-go on %s:\n%s", h.name, log)
		}
	})
	eventually(t, 10*time.Second, func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("wireguard-go on %s ended: %v", h.name, err)
		default:
		}
		if _, err := os.Stat(s.sock); err != nil {
			return fmt.Errorf("wireguard-go's UAPI socket: %w", err)
		}
		return nil
	})
	wgRun(c, h, "wg", "set", spec.Dev, "private-key", keyFile, "listen-port", strconv.Itoa(spec.Port),
		"peer", spec.PeerKey, "endpoint", spec.PeerEndpoint, "allowed-ips", spec.PeerAllowed.String())
	c.sh(h.ns, fmt.Sprintf("ip link set %[1]s mtu 1420 && ip addr add %[2]s/%[3]d dev %[1]s && "+
		"ip link set %[1]s up && ip route replace %[4]s dev %[1]s scope link",
		spec.Dev, spec.Subnet.Addr(), spec.Subnet.Addr().BitLen(), spec.Network))
	return s
}

// putFlannelWGLease writes h's lease of subnet as flanneld's wireguard backend does
// (IPv4: PublicIP, BackendData with PublicKey and Port), under an etcd lease of an hour.
func putFlannelWGLease(c *cluster, h *host, subnet netip.Prefix, pub string, port int) {
	c.t.Helper()
	attrs := map[string]any{"PublicIP": h.ip, "PublicIPv6": nil, "BackendType": "wireguard",
		"BackendData": map[string]any{"PublicKey": pub, "Port": port}}
	val, _ := json.Marshal(attrs)
	cli := c.etcdClient()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	grant, err := cli.Grant(ctx, 3600)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := cli.Put(ctx, prefix+"/subnets/"+lease.SubnetKey(subnet), string(val), clientv3.WithLease(grant.ID)); err != nil {
		c.t.Fatal(err)
	}
}

// wgStockPair is weftd (a) and a stock WireGuard host (b) on lan1, each with a pod,
// the pods pinging each other across WireGuard.
type wgStockPair struct {
	c          *cluster
	a, b       *host
	podA, podB string
	keyA       string // weftd's public key
	portA      int
	stock      *stockWG
}

// wgStockSubnet is the stock host's subnet (as a flanneld would have leased it).
var wgStockSubnet = netip.MustParsePrefix("198.18.200.0/24")

// newWGStockPair starts weftd on a, wireguard-go on b peered with it, writes b's lease
// so that weftd takes b as its peer, and waits until the pods ping both ways.
func newWGStockPair(t *testing.T) *wgStockPair {
	t.Helper()
	c := wgCluster(t)
	p := &wgStockPair{c: c, a: c.addHost("a", "lan1"), b: c.addHost("b", "lan1")}
	startWG(c, p.a)
	envA := c.waitSubnetEnv(p.a)
	p.podA = c.attachPod(p.a, envA)
	p.keyA, p.portA = wgLeaseData(c, p.a)
	p.stock = startStockWG(c, p.b, stockWGSpec{Dev: "flannel-wg", Port: 51820, PeerKey: p.keyA,
		PeerEndpoint: fmt.Sprintf("%s:%d", p.a.ip, p.portA), PeerAllowed: envA.Subnet,
		Subnet: wgStockSubnet, Network: envA.Network})
	putFlannelWGLease(c, p.b, wgStockSubnet, p.stock.key, 51820)
	p.podB = c.attachPod(p.b, lease.SubnetEnv{Network: envA.Network, Subnet: wgStockSubnet, MTU: 1420})
	c.ping(p.a.pod, p.podB)
	c.ping(p.b.pod, p.podA)
	return p
}

// weftSock is the UAPI socket of weftd's flannel-wg on a.
func (p *wgStockPair) weftSock() string {
	return filepath.Join(wgDir(p.c, p.a), "sock", "flannel-wg.sock")
}

// wgDrops is the sum of weft_wireguard_dropped_packets_total{device=flannel-wg} over
// every reason, and the counts by reason.
func wgDrops(t *testing.T, h *host) (float64, map[string]float64) {
	t.Helper()
	by := map[string]float64{}
	var total float64
	mf := mustScrape(t, h)["weft_wireguard_dropped_packets_total"]
	if mf == nil {
		t.Fatalf("no weft_wireguard_dropped_packets_total in /metrics of %s", h.name)
	}
	for _, m := range mf.GetMetric() {
		var dev, reason string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "device":
				dev = l.GetValue()
			case "reason":
				reason = l.GetValue()
			}
		}
		if dev == "flannel-wg" {
			by[reason] = m.GetCounter().GetValue()
			total += by[reason]
		}
	}
	return total, by
}

// wgDropDelta is after - before, by reason, leaving out reasons that did not move.
func wgDropDelta(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for r, v := range after {
		if v != before[r] {
			d[r] = v - before[r]
		}
	}
	return d
}

// uapiPeer is one peer of a UAPI "get" answer.
type uapiPeer struct {
	endpoint  string
	handshake time.Time // zero when none
}

// uapiPeers asks the WireGuard device behind UAPI socket sock (weftd's or
// wireguard-go's) for its peers, by public key (base64). The handshake time is the
// device's own, to the nanosecond (`wg show` only gives seconds).
func uapiPeers(t *testing.T, sock string) map[string]uapiPeer {
	t.Helper()
	conn, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		t.Fatalf("UAPI %s: %v", sock, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("get=1\n\n")); err != nil {
		t.Fatalf("UAPI %s: %v", sock, err)
	}
	out := map[string]uapiPeer{}
	var key string
	var cur uapiPeer
	var sec, nsec int64
	flush := func() {
		if key != "" {
			if sec != 0 || nsec != 0 {
				cur.handshake = time.Unix(sec, nsec)
			}
			out[key] = cur
		}
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break
		}
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "public_key":
			flush()
			b, err := hex.DecodeString(v)
			if err != nil {
				t.Fatalf("UAPI %s: public_key %q", sock, v)
			}
			key, cur, sec, nsec = base64.StdEncoding.EncodeToString(b), uapiPeer{}, 0, 0
		case "endpoint":
			cur.endpoint = v
		case "last_handshake_time_sec":
			sec, _ = strconv.ParseInt(v, 10, 64)
		case "last_handshake_time_nsec":
			nsec, _ = strconv.ParseInt(v, 10, 64)
		case "errno":
			if v != "0" {
				t.Fatalf("UAPI %s: errno %s", sock, v)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("UAPI %s: %v", sock, err)
	}
	flush()
	return out
}

// packetCapture is an AF_PACKET socket on one interface of a namespace: it sees the
// packets the interface sends and receives, as they are on the wire (less the
// link-layer header).
type packetCapture struct {
	f *os.File
}

// capture opens a packetCapture on ifname inside ns; it is closed at cleanup.
func capture(t *testing.T, ns *netns.NS, ifname string) *packetCapture {
	t.Helper()
	// ETH_P_ALL: a socket bound to one protocol is not given what the host sends.
	proto := int(htons(unix.ETH_P_ALL))
	var fd int
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto); err != nil {
			return fmt.Errorf("AF_PACKET socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind AF_PACKET to %s: %w", ifname, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("capture on %s of %s: %v", ifname, ns.Name, err)
	}
	pc := &packetCapture{f: os.NewFile(uintptr(fd), "packet:"+ifname)}
	t.Cleanup(func() { pc.f.Close() })
	return pc
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// udpDatagram is one captured IPv4 UDP datagram.
type udpDatagram struct {
	src, dst netip.AddrPort
	payload  []byte
}

// next returns the next UDP datagram the capture sees for which match is true,
// failing the test when none comes within d.
func (pc *packetCapture) next(t *testing.T, d time.Duration, match func(udpDatagram) bool) udpDatagram {
	t.Helper()
	deadline := time.Now().Add(d)
	buf := make([]byte, 65536)
	for {
		_ = pc.f.SetReadDeadline(deadline)
		n, err := pc.f.Read(buf)
		if err != nil {
			t.Fatalf("no matching datagram captured within %v: %v", d, err)
		}
		if u, ok := parseUDP4(buf[:n]); ok && match(u) {
			return u
		}
	}
}

// parseUDP4 reads an IPv4 packet carrying a whole UDP datagram (no fragment).
func parseUDP4(b []byte) (udpDatagram, bool) {
	if len(b) < 20 || b[0]>>4 != 4 || b[9] != unix.IPPROTO_UDP {
		return udpDatagram{}, false
	}
	ihl := int(b[0]&0xf) * 4
	total := int(binary.BigEndian.Uint16(b[2:4]))
	if binary.BigEndian.Uint16(b[6:8])&0x3fff != 0 || total > len(b) || ihl+8 > total {
		return udpDatagram{}, false
	}
	src, _ := netip.AddrFromSlice(b[12:16])
	dst, _ := netip.AddrFromSlice(b[16:20])
	u := b[ihl:total]
	return udpDatagram{
		src:     netip.AddrPortFrom(src, binary.BigEndian.Uint16(u[0:2])),
		dst:     netip.AddrPortFrom(dst, binary.BigEndian.Uint16(u[2:4])),
		payload: append([]byte(nil), u[8:]...),
	}, true
}

// wgTransportFrom matches WireGuard transport-data messages from src to dst of at
// least minLen bytes.
func wgTransportFrom(src netip.Addr, dst netip.AddrPort, minLen int) func(udpDatagram) bool {
	return func(u udpDatagram) bool {
		return u.src.Addr() == src && u.dst == dst && len(u.payload) >= minLen &&
			binary.LittleEndian.Uint32(u.payload) == wgTransport
	}
}

// udpIn opens a UDP socket inside ns bound to addr (port 0: any); closed at cleanup.
func udpIn(t *testing.T, ns *netns.NS, addr netip.AddrPort) *net.UDPConn {
	t.Helper()
	var conn *net.UDPConn
	if err := ns.Do(func() error {
		var err error
		conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addr))
		return err
	}); err != nil {
		t.Fatalf("UDP socket on %s in %s: %v", addr, ns.Name, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// tokenSink counts the datagrams a UDP socket receives, by payload prefix (up to the
// first NUL), until the socket is closed.
type tokenSink struct {
	mu   sync.Mutex
	seen map[string]int
	done chan struct{}
}

func sinkTokens(t *testing.T, conn *net.UDPConn) *tokenSink {
	s := &tokenSink{seen: map[string]int{}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		buf := make([]byte, 65536)
		for {
			n, _, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			tok, _, _ := strings.Cut(string(buf[:n]), "\x00")
			s.mu.Lock()
			s.seen[tok]++
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close(); <-s.done })
	return s
}

func (s *tokenSink) count(tok string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[tok]
}

// await waits until tok has been received.
func (s *tokenSink) await(t *testing.T, tok string) {
	t.Helper()
	eventually(t, 5*time.Second, func() error {
		if s.count(tok) == 0 {
			return fmt.Errorf("datagram %q not received", tok)
		}
		return nil
	})
}

// tokenPayload is tok, NUL padded to size bytes.
func tokenPayload(tok string, size int) []byte {
	b := make([]byte, size)
	copy(b, tok)
	return b
}

// flowPing is ping -c count -i interval -D running from ns to dst in the background;
// it is ended at cleanup if still running.
type flowPing struct {
	out  syncBuffer
	done chan struct{}
	err  error
}

func startFlowPing(t *testing.T, ns *netns.NS, dst string, count int, interval time.Duration) *flowPing {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := ns.Command(ctx, "ping", "-n", "-D", "-c", strconv.Itoa(count), "-i", fmt.Sprintf("%.3f", interval.Seconds()), "-W", "1", dst)
	p := &flowPing{done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { cancel(); <-p.done })
	return p
}

// replies is the number of replies so far.
func (p *flowPing) replies() int { return strings.Count(p.out.String(), "bytes from") }

// awaitReplies waits until the ping has had n replies.
func (p *flowPing) awaitReplies(t *testing.T, n int) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if got := p.replies(); got < n {
			return fmt.Errorf("%d ping replies, waiting for %d:\n%s", got, n, p.out.String())
		}
		return nil
	})
}

// wait waits for the ping to end and returns its summary and reply times.
func (p *flowPing) wait(t *testing.T, within time.Duration) (sent, got int, replies []time.Time) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("ping did not end within %v:\n%s", within, p.out.String())
	}
	var ee *exec.ExitError
	if p.err != nil && !errors.As(p.err, &ee) {
		t.Fatalf("ping: %v", p.err)
	}
	sent, got, err := pingSummary(p.out.String())
	if err != nil {
		t.Fatal(err)
	}
	return sent, got, replyTimes(p.out.String())
}
