// Package kubeproc runs a real kube-apiserver (built from its Go module by
// test/kube, cached) against a real etcd, for the Kubernetes subnet manager's tests.
// It authorizes with RBAC; its Token is an admin (system:masters) for the test itself.
package kubeproc

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Version is the Kubernetes release test/kube builds.
const Version = "v1.37.2"

// ErrNotReady is returned when the API server did not become ready in time.
var ErrNotReady = errors.New("kube-apiserver did not become ready")

// Binary returns the cached kube-apiserver, building it from test/kube (in repoRoot)
// when it is missing. The first build takes several minutes.
func Binary(ctx context.Context, repoRoot string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "weft", "kube-apiserver-"+Version)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	// A name of this process's own: two test binaries may build at once, and each
	// renames its finished build into place.
	tmp := fmt.Sprintf("%s.tmp%d", bin, os.Getpid())
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, ".")
	cmd.Dir = filepath.Join(repoRoot, "test", "kube")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build kube-apiserver in %s: %w: %s", cmd.Dir, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("install kube-apiserver: %w", err)
	}
	return bin, nil
}

// Options say where the API server runs.
type Options struct {
	Binary string
	Etcd   string // etcd client URL
	Netns  string // run inside this namespace (ip netns exec); "" for this one
	Host   string // listen address (default 127.0.0.1)
	Port   int    // default 6443
	// Dial reaches Host:Port (for a server inside a namespace); default net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Server is a running kube-apiserver.
type Server struct {
	URL        string
	Token      string
	Kubeconfig string // a kubeconfig file with URL and Token
	dir        string
	cmd        *exec.Cmd
	done       chan struct{}
	mu         sync.Mutex
	log        []byte
}

// Start runs the API server and waits for /readyz.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = 6443
	}
	dir, err := os.MkdirTemp("", "weft-kube-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, URL: "https://" + net.JoinHostPort(o.Host, strconv.Itoa(o.Port))}
	if err := s.files(); err != nil {
		s.Close()
		return nil, err
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	args := []string{
		"--etcd-servers=" + o.Etcd,
		"--etcd-prefix=/registry-" + hex.EncodeToString(rnd[:]),
		"--bind-address=" + o.Host,
		"--advertise-address=" + o.Host,
		"--secure-port=" + strconv.Itoa(o.Port),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(dir, "sa.pem"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.pem"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC", // weftd gets only deploy/rbac.yml's rights (internal/kubetest)
		"--service-cluster-ip-range=198.18.254.0/24",
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
	}
	bin := o.Binary
	if o.Netns != "" {
		args = append([]string{"netns", "exec", o.Netns, bin}, args...)
		bin = "ip"
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = s
	cmd.Stderr = s
	if err := cmd.Start(); err != nil {
		s.Close()
		return nil, fmt.Errorf("start kube-apiserver: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	if err := s.waitReady(ctx, o); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Write keeps the server's output for error messages (its tail).
func (s *Server) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, p...)
	if len(s.log) > 16<<10 {
		s.log = s.log[len(s.log)-8<<10:]
	}
	return len(p), nil
}

func (s *Server) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.log)
}

func (s *Server) waitReady(ctx context.Context, o Options) error {
	dial := o.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 2 * time.Second}).DialContext
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext:     dial,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // self-signed test server
	}}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("%w: it exited:\n%s", ErrNotReady, s.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+s.Token)
		resp, err := hc.Do(req)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
	}
	return fmt.Errorf("%w at %s:\n%s", ErrNotReady, s.URL, s.tail())
}

// files writes the service-account key, the token file and the kubeconfig.
func (s *Server) files() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(filepath.Join(s.dir, "sa.pem"), keyPEM, 0o600); err != nil {
		return err
	}
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	s.Token = hex.EncodeToString(tok[:])
	if err := os.WriteFile(filepath.Join(s.dir, "tokens.csv"),
		[]byte(s.Token+",weft-admin,weft-admin,system:masters\n"), 0o600); err != nil {
		return err
	}
	s.Kubeconfig = filepath.Join(s.dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: %s
contexts:
- name: lab
  context:
    cluster: lab
    user: admin
current-context: lab
`, s.URL, s.Token)
	return os.WriteFile(s.Kubeconfig, []byte(kc), 0o600)
}

// Close stops the server and removes its files.
func (s *Server) Close() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	_ = os.RemoveAll(s.dir)
}
