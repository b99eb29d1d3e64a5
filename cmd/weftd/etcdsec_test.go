package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	client "go.etcd.io/etcd/client/v2"

	"github.com/weftnet/weft/bench/etcdtest"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/bench/testpki"
)

// These tests run the real weftd binary ($WEFT_BIN/weftd, else a fresh build) against
// a real etcd over TLS with client certificates and authentication, and read what it
// logs. The alloc backend keeps them light: one namespace holds etcd (on its
// loopback) and weftd, whose external interface is eth0 with 192.0.2.10.

const allocConfig = `{"Network":"198.18.0.0/16","Backend":{"Type":"alloc"}}`

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func weftdBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs weftd against a real etcd; skipped with -short")
	}
	if d := os.Getenv("WEFT_BIN"); d != "" {
		return filepath.Join(d, "weftd")
	}
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "weftd-test-"); buildErr != nil {
			return
		}
		if out, err := exec.Command("go", "build", "-o", buildDir, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "weftd")
}

// logLine is one JSON line weftd logged.
type logLine map[string]any

func (l logLine) str(k string) string { s, _ := l[k].(string); return s }

// weftdProc is a running weftd and what it logged.
type weftdProc struct {
	cmd     *exec.Cmd
	dir     string
	started time.Time
	mu      sync.Mutex
	lines   []logLine
	raw     []string
	newLine chan struct{}
	done    chan struct{}
	exit    error
}

// startWeftd runs weftd with args after the flags every test needs; it is stopped at
// cleanup and its log shown if the test failed.
func startWeftd(t *testing.T, ns *netns.NS, args ...string) *weftdProc {
	t.Helper()
	bin := weftdBinary(t)
	p := &weftdProc{dir: t.TempDir(), newLine: make(chan struct{}, 1), done: make(chan struct{})}
	args = append([]string{"netns", "exec", ns.Name, bin,
		"--iface=eth0", "--iptables-forward-rules=false", "-v=1",
		"--subnet-file=" + filepath.Join(p.dir, "subnet.env"),
		"--lease-state-file=" + filepath.Join(p.dir, "lease.json"),
	}, args...)
	p.cmd = exec.Command("ip", args...) // ip netns exec execs weftd: same pid
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = p.cmd.Stderr
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l logLine
			_ = json.Unmarshal(sc.Bytes(), &l)
			p.mu.Lock()
			p.lines, p.raw = append(p.lines, l), append(p.raw, sc.Text())
			p.mu.Unlock()
			select {
			case p.newLine <- struct{}{}:
			default:
			}
		}
		p.exit = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("weftd log:\n%s", p.log())
		}
	})
	return p
}

func (p *weftdProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.raw, "\n")
}

// await waits until some logged line satisfies match and returns it and when weftd
// logged it, relative to its start.
func (p *weftdProc) await(t *testing.T, what string, match func(logLine) bool) (logLine, time.Duration) {
	t.Helper()
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	seen := 0
	for {
		p.mu.Lock()
		for ; seen < len(p.lines); seen++ {
			if l := p.lines[seen]; match(l) {
				p.mu.Unlock()
				ts, _ := time.Parse("2006-01-02T15:04:05.000Z0700", l.str("ts"))
				return l, ts.Sub(p.started).Round(100 * time.Millisecond)
			}
		}
		p.mu.Unlock()
		select {
		case <-p.newLine:
		case <-p.done:
			// Take the lines that came with the exit, then give up.
			p.mu.Lock()
			n := len(p.lines)
			p.mu.Unlock()
			if seen == n {
				t.Fatalf("weftd exited (%v) before logging %s", p.exit, what)
			}
		case <-timeout.C:
			t.Fatalf("weftd did not log %s within 60 s", what)
		}
	}
}

// stop sends SIGTERM and returns the exit error (nil for status 0).
func (p *weftdProc) stop(t *testing.T) error {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		return p.exit
	case <-time.After(20 * time.Second):
		t.Fatal("weftd did not exit within 20 s of SIGTERM")
		return nil
	}
}

// hostNS makes the namespace weftd and etcd run in, with eth0 192.0.2.10/24.
func hostNS(t *testing.T) *netns.NS {
	t.Helper()
	weftdBinary(t) // skips with -short first
	ns := netnstest.New(t, "weftd-etcd")
	netnstest.Uplink(t, ns, "eth0", "192.0.2.10/24")
	return ns
}

// secureEtcd is a TLS etcd with auth on both APIs, the role of docs/operations.md for prefix, the
// alloc config under it, and certificates that must fail.
type secureEtcd struct {
	*etcdtest.Secure
	prefix            string
	otherCA           *testpki.CA
	stranger, expired testpki.Pair
}

func newSecureEtcd(t *testing.T) *secureEtcd {
	t.Helper()
	s := &secureEtcd{Secure: etcdtest.StartSecureIn(t, hostNS(t)), prefix: "/weft-e2e/net"}
	s.SetupAuth(t, s.prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.V3(t).Put(ctx, s.prefix+"/config", allocConfig); err != nil {
		t.Fatal(err)
	}
	if _, err := client.NewKeysAPI(s.V2(t)).Set(ctx, s.prefix+"/config", allocConfig, nil); err != nil {
		t.Fatal(err)
	}
	var err error
	if s.otherCA, err = testpki.NewCA(s.Dir, "other-ca"); err != nil {
		t.Fatal(err)
	}
	if s.stranger, err = s.otherCA.Issue(testpki.Spec{Name: "stranger", Client: true}); err != nil {
		t.Fatal(err)
	}
	if s.expired, err = s.CA.Issue(testpki.Spec{Name: "expired", Client: true,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	return s
}

// leaseValue reads key as root with the API weftd used ("" when it is missing).
func (s *secureEtcd) leaseValue(t *testing.T, api, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if api == "v2" {
		resp, err := client.NewKeysAPI(s.V2(t)).Get(ctx, key, nil)
		if err != nil {
			t.Fatalf("v2 get %s: %v", key, err)
		}
		return resp.Node.Value
	}
	resp, err := s.V3(t).Get(ctx, key)
	if err != nil {
		t.Fatalf("v3 get %s: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// flags are weftd's etcd flags; change edits them before they are made.
func (s *secureEtcd) flags(api string, change func(f map[string]string)) []string {
	f := map[string]string{
		"etcd-endpoints": s.Endpoint(), "etcd-prefix": s.prefix, "etcd-api": api,
		"etcd-cafile": s.CA.CertFile, "etcd-certfile": s.Client.CertFile, "etcd-keyfile": s.Client.KeyFile,
		"etcd-username": etcdtest.WeftdUser, "etcd-password": etcdtest.WeftdPassword,
	}
	if change != nil {
		change(f)
	}
	var out []string
	for k, v := range f {
		out = append(out, "--"+k+"="+v)
	}
	return out
}

// TestWeftdEtcdTLSAndAuth: weftd leases a subnet over TLS with its client certificate
// as the least-privilege user of docs/operations.md, on both APIs.
func TestWeftdEtcdTLSAndAuth(t *testing.T) {
	s := newSecureEtcd(t)
	for _, api := range []string{"v3", "v2"} {
		t.Run(api, func(t *testing.T) {
			p := startWeftd(t, s.NS, s.flags(api, nil)...)
			l, after := p.await(t, "lease acquired", func(l logLine) bool { return l.str("msg") == "lease acquired" })
			subnet := l.str("subnet")
			key := s.prefix + "/subnets/" + strings.Replace(subnet, "/", "-", 1)
			if v := s.leaseValue(t, api, key); !strings.Contains(v, `"PublicIP":"192.0.2.10"`) {
				t.Fatalf("etcd holds %q at %s, want weftd's lease", v, key)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				env, err := os.ReadFile(filepath.Join(p.dir, "subnet.env"))
				if err == nil && strings.Contains(string(env), "FLANNEL_SUBNET="+strings.TrimSuffix(subnet, ".0/24")+".1/24") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("subnet.env = %q, %v; want the leased %s", env, err, subnet)
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("%s: leased %s after %v", api, subnet, after)
			if err := p.stop(t); err != nil {
				t.Fatalf("weftd exit after SIGTERM: %v", err)
			}
		})
	}
}

// TestWeftdEtcdRefusals: every way etcd can refuse weftd gives one error line naming
// the cause, then retries with a growing backoff (not a hot loop, not an exit), and
// weftd stops cleanly on SIGTERM while it waits.
func TestWeftdEtcdRefusals(t *testing.T) {
	s := newSecureEtcd(t)
	cases := []struct {
		name   string
		apis   []string
		change func(f map[string]string)
		words  []string
	}{
		{"wrong CA", []string{"v3", "v2"}, func(f map[string]string) { f["etcd-cafile"] = s.otherCA.CertFile },
			[]string{"etcd TLS handshake failed", "certificate signed by unknown authority", "--etcd-cafile=" + s.otherCA.CertFile}},
		{"expired client certificate", []string{"v3", "v2"}, func(f map[string]string) {
			f["etcd-certfile"], f["etcd-keyfile"] = s.expired.CertFile, s.expired.KeyFile
		}, []string{"etcd TLS handshake failed", "etcd refused our client certificate", "expired at"}},
		{"client certificate etcd refuses", []string{"v3", "v2"}, func(f map[string]string) {
			f["etcd-certfile"], f["etcd-keyfile"] = s.stranger.CertFile, s.stranger.KeyFile
		}, []string{"etcd TLS handshake failed", "etcd refused our client certificate", "remote error: tls: "}},
		{"wrong password", []string{"v3"}, func(f map[string]string) { f["etcd-password"] = "wrong" },
			[]string{"etcd authentication failed", `user "weftd"`, "invalid user ID or password"}},
		{"user without rights on the prefix", []string{"v3"}, func(f map[string]string) {
			f["etcd-username"], f["etcd-password"] = etcdtest.OutsiderUser, etcdtest.OutsiderSecret
		}, []string{"etcd permission denied", "user outsider", s.prefix + "/config"}},
		// etcd's v2 API answers a wrong password and a missing permission alike.
		{"wrong password", []string{"v2"}, func(f map[string]string) { f["etcd-password"] = "wrong" },
			[]string{"etcd authentication failed or etcd permission denied", "user weftd", "Insufficient credentials"}},
		{"user without rights on the prefix", []string{"v2"}, func(f map[string]string) {
			f["etcd-username"], f["etcd-password"] = etcdtest.OutsiderUser, etcdtest.OutsiderSecret
		}, []string{"etcd authentication failed or etcd permission denied", "user outsider", s.prefix + "/config"}},
	}
	for _, c := range cases {
		for _, api := range c.apis {
			t.Run(c.name+"/"+api, func(t *testing.T) {
				p := startWeftd(t, s.NS, s.flags(api, c.change)...)
				expectRetrying(t, p, c.words)
			})
		}
	}
}

// TestWeftdEtcdNoRightsOnLeases: the user may read the config but not the leases;
// weftd names the key and the rights it lacks while it retries to acquire a lease
// (on v2 too, whose 401 says nothing more, as the password did read the config).
func TestWeftdEtcdNoRightsOnLeases(t *testing.T) {
	s := newSecureEtcd(t)
	for _, api := range []string{"v3", "v2"} {
		t.Run(api, func(t *testing.T) {
			p := startWeftd(t, s.NS, s.flags(api, func(f map[string]string) {
				f["etcd-username"], f["etcd-password"] = etcdtest.ReaderUser, etcdtest.ReaderSecret
			})...)
			const msg = "acquiring a lease failed; retrying"
			l, after := p.await(t, "the lease failure", func(l logLine) bool { return l.str("msg") == msg })
			for _, w := range []string{"permission denied", "user reader on " + s.prefix + "/subnets/", "readwrite on the keys under " + s.prefix + "/subnets/"} {
				if !strings.Contains(l.str("error"), w) {
					t.Errorf("error does not say %q: %s", w, l.str("error"))
				}
			}
			if strings.Contains(l.str("error"), "authentication failed") {
				t.Errorf("blames the password that read the config: %s", l.str("error"))
			}
			t.Logf("after %v: %s", after, l.str("error"))
			if err := p.stop(t); err != nil {
				t.Fatalf("weftd exit after SIGTERM while acquiring: %v", err)
			}
			p.await(t, "a clean stop", func(l logLine) bool { return l.str("msg") == "stopped while acquiring a lease" })
		})
	}
}

// TestWeftdEtcdUnreachable: nothing listens at the endpoint. weftd says so, keeps
// trying, and stops cleanly on SIGTERM.
func TestWeftdEtcdUnreachable(t *testing.T) {
	ns := hostNS(t)
	const ep = "http://127.0.0.1:2379" // in ns, where nothing listens
	for _, api := range []string{"v3", "v2"} {
		t.Run(api, func(t *testing.T) {
			p := startWeftd(t, ns, "--etcd-endpoints="+ep, "--etcd-api="+api)
			expectRetrying(t, p, []string{"no connection to etcd at " + ep, "connection refused"})
		})
	}
}

// expectRetrying checks the first error names the cause in words, that weftd then
// tries again twice with a backoff that does not shrink (debug lines), and that it
// exits with status 0 on SIGTERM.
func expectRetrying(t *testing.T, p *weftdProc, words []string) {
	t.Helper()
	const msg = "cannot read the network config from etcd; retrying"
	first, after := p.await(t, "the cause", func(l logLine) bool { return l.str("msg") == msg })
	if first.str("level") != "error" {
		t.Errorf("first report at level %q, want error", first.str("level"))
	}
	for _, w := range words {
		if !strings.Contains(first.str("error"), w) {
			t.Errorf("error does not say %q: %s", w, first.str("error"))
		}
	}
	t.Logf("after %v: %s", after, first.str("error"))
	var waits []time.Duration
	for _, n := range []float64{2, 3} {
		l, _ := p.await(t, fmt.Sprintf("attempt %v", n), func(l logLine) bool {
			a, _ := l["attempt"].(float64)
			return l.str("msg") == msg && a == n
		})
		for _, w := range words[:1] {
			if !strings.Contains(l.str("error"), w) {
				t.Errorf("attempt %v failed otherwise: %s", n, l.str("error"))
			}
		}
		d, err := time.ParseDuration(l.str("retry-in"))
		if err != nil {
			t.Fatalf("retry-in %q: %v", l.str("retry-in"), err)
		}
		waits = append(waits, d)
	}
	if waits[0] < time.Second || waits[1] < waits[0] {
		t.Errorf("retries %v apart: want at least 1 s, not shrinking", waits)
	}
	if err := p.stop(t); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("weftd exited with %v on SIGTERM while waiting for etcd", ee)
		}
		t.Fatal(err)
	}
	p.await(t, "a clean stop", func(l logLine) bool { return l.str("msg") == "stopped while waiting for the network config" })
}
