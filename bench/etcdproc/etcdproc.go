// Package etcdproc runs a real etcd server (Debian's etcd-server) for tests, the demo
// and benchmarks: on a free loopback port, or on a given address inside a network
// namespace, with the v2 API enabled, in a temporary data directory; optionally over
// TLS with client certificates. StartCluster runs several such servers as the
// members of one cluster.
package etcdproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrNotReady is returned when etcd did not report readiness in time.
var ErrNotReady = errors.New("etcd did not become ready")

// Options says where etcd runs.
type Options struct {
	Binary string // default "etcd" on PATH
	Netns  string // run inside this network namespace (ip netns exec); "" for this one
	Host   string // address to listen on; default 127.0.0.1
	Port   int    // client port; default a free port (loopback) or 2379 (namespace)
	Dir    string // data directory; default a new temp dir, removed by Stop
	TLS    *TLS   // serve clients over TLS (https://); nil for plain http
	// Name is the member's name (default "weft-test").
	Name string
	// Cluster is --initial-cluster, every member's name=peerURL, comma-separated,
	// for a member of a cluster (StartCluster sets it); "" for a cluster of one.
	// Peers talk plain http on port Port+1 whatever TLS says.
	Cluster string
}

// TLS is etcd's client-facing TLS: its certificate and, with ClientCertAuth, the CA
// that must have signed every client's certificate.
type TLS struct {
	CertFile, KeyFile string
	TrustedCAFile     string
	ClientCertAuth    bool
}

// Server is a running etcd.
type Server struct {
	opts    Options
	ownDir  bool
	peer    int
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	logTail *tail
}

// Endpoint is the client URL: https:// when etcd serves TLS.
func (s *Server) Endpoint() string {
	scheme := "http://"
	if s.opts.TLS != nil {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.Port))
}

// Start starts etcd and waits until it serves clients. A member of a cluster
// (Options.Cluster) serves clients only once a quorum of its members runs: start
// them together (StartCluster).
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.Binary == "" {
		o.Binary = "etcd"
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Name == "" {
		o.Name = "weft-test"
	}
	s := &Server{opts: o}
	if o.Port == 0 {
		if o.Netns != "" {
			s.opts.Port, s.peer = 2379, 2380
		} else {
			p, err := freePorts(2)
			if err != nil {
				return nil, err
			}
			s.opts.Port, s.peer = p[0], p[1]
		}
	} else {
		s.peer = o.Port + 1
	}
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "weft-etcd-")
		if err != nil {
			return nil, fmt.Errorf("etcd data dir: %w", err)
		}
		s.opts.Dir, s.ownDir = d, true
	}
	if err := s.start(ctx); err != nil {
		s.removeDir()
		return nil, err
	}
	return s, nil
}

// Name is the member's name.
func (s *Server) Name() string { return s.opts.Name }

// PeerURL is the URL the member's peers reach it on (always http://).
func (s *Server) PeerURL() string {
	return "http://" + net.JoinHostPort(s.opts.Host, strconv.Itoa(s.peer))
}

func (s *Server) start(ctx context.Context) error {
	peerURL := s.PeerURL()
	cluster := s.opts.Cluster
	if cluster == "" {
		cluster = s.opts.Name + "=" + peerURL
	}
	args := []string{
		"--name", s.opts.Name,
		"--data-dir", s.opts.Dir,
		"--listen-client-urls", s.Endpoint(),
		"--advertise-client-urls", s.Endpoint(),
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", cluster,
		"--enable-v2",
		"--logger", "zap",
	}
	if t := s.opts.TLS; t != nil {
		args = append(args, "--cert-file", t.CertFile, "--key-file", t.KeyFile)
		if t.TrustedCAFile != "" {
			args = append(args, "--trusted-ca-file", t.TrustedCAFile)
		}
		if t.ClientCertAuth {
			args = append(args, "--client-cert-auth")
		}
	}
	bin := s.opts.Binary
	if s.opts.Netns != "" {
		args = append([]string{"netns", "exec", s.opts.Netns, bin}, args...)
		bin = "ip"
	}
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	ready := make(chan struct{})
	t := &tail{}
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			t.add(line)
			if strings.Contains(line, "ready to serve client requests") || strings.Contains(line, "serving client traffic") {
				once.Do(func() { close(ready) })
			}
		}
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done, s.logTail = cmd, done, t
	s.mu.Unlock()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case <-ready:
		return nil
	case <-done:
		return fmt.Errorf("etcd exited at start: %w; last log lines:\n%s", ErrNotReady, t.String())
	case <-timer.C:
	case <-ctx.Done():
	}
	s.kill()
	return fmt.Errorf("%w at %s; last log lines:\n%s", ErrNotReady, s.Endpoint(), t.String())
}

// Stop stops etcd (keeping its data) so that Restart can start it again.
func (s *Server) Stop() {
	s.kill()
}

func (s *Server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Kill ends etcd with SIGKILL, as a crash would, and waits for it; its data stays, so
// that Restart can start it again.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart starts a stopped etcd again on the same ports and data.
func (s *Server) Restart(ctx context.Context) error {
	s.kill()
	return s.start(ctx)
}

// Close stops etcd and removes its data directory if Start made it.
func (s *Server) Close() {
	s.kill()
	s.removeDir()
}

func (s *Server) removeDir() {
	if s.ownDir {
		_ = os.RemoveAll(s.opts.Dir)
	}
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tail keeps the last lines etcd logged, for error messages.
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (t *tail) add(l string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, l)
	if len(t.lines) > 20 {
		t.lines = t.lines[len(t.lines)-20:]
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}
