// Package e2e runs bin/weftd on network-namespace hosts that share a real etcd, and
// checks what a user would: leases in etcd, subnet.env, pod-to-pod traffic.
package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
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
func binDir() string { return labtest.BinDir("../bin") }

// cluster is a lab (package lab): a router namespace joining two underlay LANs
// (192.0.2.0/24 and 198.51.100.0/24), a real etcd on 192.0.2.1:2379 inside it, and
// hosts on the LANs, with weftd on etcd's v3 or v2 API (api).
type cluster struct {
	t      *testing.T
	lab    *lab.Lab
	router *netns.NS
	etcd   *etcdproc.Server
	api    string
	bin    string
	hosts  []*host // in the order added
}

// host is a lab host with the daemon it runs (or ran last) and its pod.
type host struct {
	name   string
	ns     *netns.NS
	ip     string
	lh     *lab.Host
	daemon *lab.Daemon
	pod    *netns.NS
}

func newCluster(t *testing.T, api string) *cluster {
	t.Helper()
	l := labtest.New(t, lab.Spec{Prefix: "we"})
	testenv.NeedTools(t, "ping")
	bin := weftd(t)
	return &cluster{t: t, lab: l, router: l.Router(), etcd: l.Etcd(), api: api, bin: bin}
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

// putConfig writes the network config (through both APIs).
func (c *cluster) putConfig(cfg string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.lab.Put(ctx, prefix+"/config", cfg); err != nil {
		c.t.Fatal(err)
	}
}

// addHost makes a host on lan ("lan1" or "lan2") with eth0 on the underlay.
func (c *cluster) addHost(name, lan string) *host {
	c.t.Helper()
	lh, err := c.lab.AddHost(context.Background(), lab.HostSpec{Name: name, LAN: lan})
	if err != nil {
		c.t.Fatal(err)
	}
	h := &host{name: name, ns: lh.NS, ip: lh.Addr.String(), lh: lh}
	c.hosts = append(c.hosts, h)
	return h
}

// start runs weftd on h with the cluster's etcd; it is stopped at cleanup.
func (c *cluster) start(h *host, extra ...string) {
	c.t.Helper()
	c.run(h, lab.DaemonSpec{Binary: c.bin, Weft: true,
		Args: append([]string{"--etcd-api=" + c.api, "--healthz-ip=127.0.0.1", "--healthz-port=8475"}, extra...)})
}

// run starts a daemon on h (the lab gives it flanneld's common flags: --iface,
// --subnet-file and, unless spec.NoEtcd, the etcd ones). The lab stops it at cleanup
// and shows its log when the test failed.
func (c *cluster) run(h *host, spec lab.DaemonSpec) {
	c.t.Helper()
	d, err := c.lab.Start(context.Background(), h.lh, spec)
	if err != nil {
		c.t.Fatal(err)
	}
	h.daemon = d
}

// stop sends SIGTERM to the daemon on h and waits for it.
func (c *cluster) stop(h *host) {
	c.t.Helper()
	if h.daemon == nil {
		return
	}
	if err := h.daemon.Stop(); err != nil {
		c.t.Fatal(err)
	}
}

// cleanup runs `weftd cleanup` on h (its daemon stopped), as an operator would.
func (c *cluster) cleanup(h *host) {
	c.t.Helper()
	if out, err := h.ns.Run(context.Background(), c.bin, "cleanup", "--subnet-file="+h.subnetFile()); err != nil {
		c.t.Fatalf("weftd cleanup on %s: %v\n%s", h.name, err, out)
	}
}

// logs is the log of the daemon on h, over its restarts.
func (h *host) logs() string {
	if h.daemon == nil {
		return ""
	}
	return h.daemon.Log()
}

func (h *host) subnetFile() string { return h.daemon.SubnetFile() }

// waitSubnetEnv waits until the daemon on h has written subnet.env.
func (c *cluster) waitSubnetEnv(h *host) lease.SubnetEnv {
	c.t.Helper()
	if h.daemon == nil {
		c.t.Fatalf("no daemon on %s", h.name)
	}
	env, err := h.daemon.WaitSubnetEnv(context.Background(), 30*time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	return env
}

// attachPod makes a pod namespace behind bridge cni0 of h, as the bridge CNI plugin
// would from subnet.env, and returns the pod's address.
func (c *cluster) attachPod(h *host, env lease.SubnetEnv) string {
	c.t.Helper()
	p, err := c.lab.AttachPod(context.Background(), h.lh, env)
	if err != nil {
		c.t.Fatal(err)
	}
	h.pod = p.NS
	return p.Addr.String()
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

// eventually retries f until it returns nil or d passes (testenv.Eventually).
func eventually(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	testenv.Eventually(t, d, f)
}
