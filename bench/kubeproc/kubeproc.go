// Package kubeproc runs a real kube-apiserver (built from its Go module by
// test/kube, cached) against a real etcd, for the Kubernetes subnet manager's tests.
// It authorizes with RBAC; its Token is an admin (system:masters) for the test itself.
// The binary test/kube builds is multi-call: it is also kube-controller-manager,
// kube-scheduler and kubelet when its first argument names one (bench/kubecluster).
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
	"strings"
	"sync"
	"time"
)

// Version is the Kubernetes release test/kube builds.
const Version = "v1.37.2"

// ErrNotReady is returned when the API server did not become ready in time.
var ErrNotReady = errors.New("kube-apiserver did not become ready")

// Binary returns the cached multi-call Kubernetes binary (kube-apiserver without a
// component argument), building it from test/kube (in repoRoot) when it is missing.
// The first build takes several minutes.
func Binary(ctx context.Context, repoRoot string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	if err := os.MkdirAll(filepath.Join(cache, "weft"), 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "weft", "kube-"+Version)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	// One build at a time: test binaries of several packages (or several go test runs)
	// that need the binary at once wait for the first one's build instead of each
	// compiling Kubernetes (several times the CPU, on a 2-core machine for many minutes).
	unlock, err := lockFile(ctx, bin+".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	// A name of this process's own: two test binaries may build at once, and each
	// renames its finished build into place.
	tmp := fmt.Sprintf("%s.tmp%d", bin, os.Getpid())
	// The version is stamped as Kubernetes' own build does: kubelets register it and
	// the API server's skew checks read it.
	ldflags := "-s -w -X k8s.io/component-base/version.gitVersion=" + Version +
		" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=" + minor(Version)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags="+ldflags, "-o", tmp, ".")
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

// minor is the minor number of a version "vMAJOR.MINOR.PATCH".
func minor(v string) string {
	var major, min, patch int
	if _, err := fmt.Sscanf(v, "v%d.%d.%d", &major, &min, &patch); err != nil {
		return "0"
	}
	return strconv.Itoa(min)
}

// User is one more bearer token the API server accepts, for a component of a test
// cluster (a kubelet as system:node:<name> in system:nodes, the controller manager).
type User struct {
	Token, Name string
	Groups      []string
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
	// Authorization is --authorization-mode (default RBAC; a cluster with kubelets
	// needs Node,RBAC).
	Authorization string
	// Users are tokens besides the admin's.
	Users []User
	// Args are more flags.
	Args []string
}

// Server is a running kube-apiserver.
type Server struct {
	URL        string
	Token      string
	Kubeconfig string // a kubeconfig file with URL and Token
	// CertFile is the serving certificate the server made for itself (with its CA),
	// for clients that verify it, such as pods through kube-root-ca.crt.
	CertFile string
	// KeyFile is the service-account signing key.
	KeyFile string
	dir     string
	opts    Options  // for Restart
	argv    []string // the command line, for Restart
	cmd     *exec.Cmd
	done    chan struct{}
	mu      sync.Mutex
	log     []byte
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
	s := &Server{dir: dir, URL: "https://" + net.JoinHostPort(o.Host, strconv.Itoa(o.Port)),
		CertFile: filepath.Join(dir, "certs", "apiserver.crt"), KeyFile: filepath.Join(dir, "sa.pem")}
	if o.Authorization == "" {
		o.Authorization = "RBAC"
	}
	if err := s.files(o.Users); err != nil {
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
		"--authorization-mode=" + o.Authorization, // weftd gets only deploy/rbac.yml's rights (bench/kubetest)
		"--service-cluster-ip-range=198.18.254.0/24",
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
	}
	args = append(args, o.Args...)
	bin := o.Binary
	if o.Netns != "" {
		args = append([]string{"netns", "exec", o.Netns, bin}, args...)
		bin = "ip"
	}
	s.opts, s.argv = o, append([]string{bin}, args...)
	if err := s.start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// start runs the server's command line and waits for /readyz.
func (s *Server) start(ctx context.Context) error {
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Stdout = s
	cmd.Stderr = s
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	return s.waitReady(ctx, s.opts)
}

// Restart stops the server and starts it again as it was (same address, certificates,
// tokens and etcd prefix, so clients and the objects stay), after down.
func (s *Server) Restart(ctx context.Context, down time.Duration) error {
	s.stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	return s.start(ctx)
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

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
func (s *Server) files(users []User) error {
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
	tokens := s.Token + ",weft-admin,weft-admin,system:masters\n"
	for _, u := range users {
		tokens += fmt.Sprintf("%s,%s,%s,\"%s\"\n", u.Token, u.Name, u.Name, strings.Join(u.Groups, ","))
	}
	if err := os.WriteFile(filepath.Join(s.dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
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
	s.stop()
	_ = os.RemoveAll(s.dir)
}

// stop stops the server's process, if it runs.
func (s *Server) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		select {
		case <-s.done:
			return
		default:
		}
		_ = s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
}
