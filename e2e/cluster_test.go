// Package e2e runs bin/weftd on network-namespace hosts that share a real etcd, and
// checks what a user would: leases in etcd, subnet.env, pod-to-pod traffic.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/weftnet/weft/internal/etcdproc"
	"github.com/weftnet/weft/internal/netns"
	"github.com/weftnet/weft/internal/netnstest"
	"github.com/weftnet/weft/internal/testenv"
	"github.com/weftnet/weft/lease"
)

const prefix = "/coreos.com/network"

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// weftd returns the weftd binary: $WEFT_BIN/weftd (make test sets it) or a fresh build.
func weftd(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("WEFT_BIN"); d != "" {
		return filepath.Join(d, "weftd")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "weft-e2e-bin-")
		if buildErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(buildDir, "weftd"), "../cmd/weftd").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build weftd: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "weftd")
}

// binDir is where make puts the binaries the tests run: $WEFT_BIN, or ../bin.
func binDir() string {
	dir := os.Getenv("WEFT_BIN")
	if dir == "" {
		dir = "../bin"
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	return abs
}

// cluster is a router namespace joining two underlay LANs (192.0.2.0/24 and
// 198.51.100.0/24), a real etcd on 192.0.2.1:2379 inside it, and hosts on the LANs.
type cluster struct {
	t      *testing.T
	router *netns.NS
	etcd   *etcdproc.Server
	api    string
	bin    string
	next   map[string]int
}

type host struct {
	name  string
	ns    *netns.NS
	ip    string
	dir   string
	cmd   *exec.Cmd
	done  chan struct{}
	log   *bytes.Buffer
	logMu *sync.Mutex
	pod   *netns.NS
}

func newCluster(t *testing.T, api string) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("needs root, network namespaces and etcd")
	}
	testenv.NeedRoot(t)
	testenv.NeedTools(t, "ip", "etcd", "ping")
	c := &cluster{t: t, api: api, bin: weftd(t), next: map[string]int{"lan1": 10, "lan2": 10}}
	c.router = netnstest.New(t, "wr")
	c.sh(c.router, "sysctl -qw net.ipv4.ip_forward=1")
	c.sh(c.router, "ip link add br1 type bridge && ip addr add 192.0.2.1/24 dev br1 && ip link set br1 up")
	c.sh(c.router, "ip link add br2 type bridge && ip addr add 198.51.100.1/24 dev br2 && ip link set br2 up")
	srv, err := etcdproc.Start(context.Background(), etcdproc.Options{Netns: c.router.Name, Host: "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	c.etcd = srv
	t.Cleanup(srv.Close)
	return c
}

// sh runs a shell command line inside ns and fails the test on error.
func (c *cluster) sh(ns *netns.NS, line string) string {
	c.t.Helper()
	out, err := ns.Run(context.Background(), "sh", "-c", line)
	if err != nil {
		c.t.Fatalf("%s: %v", ns.Name, err)
	}
	return out
}

// etcdClient talks to the lab's etcd from inside the router namespace.
func (c *cluster) etcdClient() *clientv3.Client {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{c.etcd.Endpoint()},
		DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return c.router.DialContext(ctx, "tcp", addr)
		})},
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cli.Close() })
	return cli
}

func (c *cluster) putConfig(cfg string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c.api == "v2" {
		c.putV2(ctx, prefix+"/config", cfg)
		return
	}
	if _, err := c.etcdClient().Put(ctx, prefix+"/config", cfg); err != nil {
		c.t.Fatal(err)
	}
}

// putV2 writes a key over etcd's v2 HTTP API.
func (c *cluster) putV2(ctx context.Context, key, value string) {
	c.t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: c.router.DialContext}}
	body := strings.NewReader("value=" + url.QueryEscape(value))
	req, _ := http.NewRequestWithContext(ctx, "PUT", c.etcd.Endpoint()+"/v2/keys"+key, body)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		c.t.Fatalf("v2 put %s: %s", key, resp.Status)
	}
}

// addHost makes a host on lan ("lan1" or "lan2") with eth0 on the underlay.
func (c *cluster) addHost(name, lan string) *host {
	c.t.Helper()
	h := &host{name: name, ns: netnstest.New(c.t, "wh"), dir: c.t.TempDir(), log: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	n := c.next[lan]
	c.next[lan]++
	br, gw, ip := "br1", "192.0.2.1", fmt.Sprintf("192.0.2.%d", n)
	if lan == "lan2" {
		br, gw, ip = "br2", "198.51.100.1", fmt.Sprintf("198.51.100.%d", n)
	}
	h.ip = ip
	peer := fmt.Sprintf("v%s%d", lan[3:], n)
	if err := netns.Veth(h.ns, "eth0", c.router, peer); err != nil {
		c.t.Fatal(err)
	}
	c.sh(c.router, fmt.Sprintf("ip link set %s master %s", peer, br))
	c.sh(h.ns, fmt.Sprintf("ip addr add %s/24 dev eth0 && ip route add default via %s && sysctl -qw net.ipv4.ip_forward=1", ip, gw))
	return h
}

// start runs weftd on h with the cluster's etcd; it is stopped at cleanup.
func (c *cluster) start(h *host, extra ...string) {
	c.t.Helper()
	c.startWith(h, append([]string{"--etcd-endpoints=" + c.etcd.Endpoint(), "--etcd-api=" + c.api}, extra...)...)
}

// startWith runs weftd on h with the common flags and args.
func (c *cluster) startWith(h *host, args ...string) {
	c.t.Helper()
	c.run(h, c.bin, nil, append([]string{
		"--lease-state-file=" + filepath.Join(h.dir, "lease.json"),
		"--healthz-ip=127.0.0.1", "--healthz-port=8475",
	}, args...)...)
}

// run starts bin (weftd or flanneld) in h's namespace with flanneld's common flags
// (--iface, --subnet-file), then args, and env added to the environment. The process
// is stopped at cleanup, and its log shown when the test failed.
func (c *cluster) run(h *host, bin string, env []string, args ...string) {
	c.t.Helper()
	args = append([]string{"netns", "exec", h.ns.Name, bin,
		"--iface=eth0",
		"--subnet-file=" + filepath.Join(h.dir, "subnet.env"),
	}, args...)
	cmd := exec.Command("ip", args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = &lockedWriter{mu: h.logMu, w: h.log}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	h.cmd, h.done = cmd, make(chan struct{})
	done := h.done
	go func() { cmd.Wait(); close(done) }()
	c.t.Cleanup(func() {
		c.stop(h)
		if c.t.Failed() {
			c.t.Logf("%s log of %s:\n%s", filepath.Base(bin), h.name, h.logs())
		}
	})
}

// stop sends SIGTERM to the daemon on h and waits for it.
func (c *cluster) stop(h *host) {
	if h.cmd == nil {
		return
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.done:
	case <-time.After(15 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.done
	}
	h.cmd = nil
}

func (h *host) logs() string {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	return h.log.String()
}

func (h *host) subnetFile() string { return filepath.Join(h.dir, "subnet.env") }

// waitSubnetEnv waits until weftd on h has written subnet.env.
func (c *cluster) waitSubnetEnv(h *host) lease.SubnetEnv {
	c.t.Helper()
	var env lease.SubnetEnv
	eventually(c.t, 30*time.Second, func() error {
		if h.done != nil {
			select {
			case <-h.done:
				return fmt.Errorf("the daemon on %s exited:\n%s", h.name, h.logs())
			default:
			}
		}
		var err error
		env, err = lease.ReadSubnetEnv(h.subnetFile())
		return err
	})
	return env
}

// attachPod makes a pod namespace behind bridge cni0 of h, as the bridge CNI plugin
// would from subnet.env, and returns the pod's address.
func (c *cluster) attachPod(h *host, env lease.SubnetEnv) string {
	c.t.Helper()
	h.pod = netnstest.New(c.t, "wp")
	gw := env.Subnet.Addr().Next()
	pod := gw.Next()
	if err := netns.Veth(h.pod, "eth0", h.ns, "vpod"); err != nil {
		c.t.Fatal(err)
	}
	c.sh(h.ns, fmt.Sprintf("ip link add cni0 type bridge && ip addr add %s/%d dev cni0 && ip link set cni0 mtu %d up && ip link set vpod mtu %d master cni0",
		gw, env.Subnet.Bits(), env.MTU, env.MTU))
	c.sh(h.pod, fmt.Sprintf("ip link set eth0 mtu %d && ip addr add %s/%d dev eth0 && ip route add default via %s",
		env.MTU, pod, env.Subnet.Bits(), gw))
	return pod.String()
}

// ping sends a few pings from ns to dst and fails the test if none comes back.
func (c *cluster) ping(ns *netns.NS, dst string) {
	c.t.Helper()
	eventually(c.t, 15*time.Second, func() error {
		out, err := ns.Run(context.Background(), "ping", "-c", "1", "-W", "1", dst)
		if err != nil {
			return fmt.Errorf("ping %s from %s: %v: %s", dst, ns.Name, err, out)
		}
		return nil
	})
}

// eventually retries f until it returns nil or the deadline passes.
func eventually(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
