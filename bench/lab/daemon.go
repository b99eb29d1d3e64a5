package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

// ErrDaemonExited is returned when a daemon ended before it was stopped.
var ErrDaemonExited = errors.New("daemon exited")

// Daemon is weftd (or a flanneld-compatible daemon) running in a host namespace.
type Daemon struct {
	Host    *Host
	Binary  string
	Prefix  string // etcd prefix it uses
	Dir     string // its subnet.env, state file and log
	LogPath string // its stderr and stdout
	cmd     *exec.Cmd
	done    chan struct{}
	err     error // set before done is closed
	mu      sync.Mutex
	env     lease.SubnetEnv
}

// SubnetFile is the path of the daemon's subnet.env.
func (d *Daemon) SubnetFile() string { return filepath.Join(d.Dir, "subnet.env") }

// Pid is the daemon's process id (ip netns exec execs it in place).
func (d *Daemon) Pid() int {
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// flagValue returns the value of --name=v or --name v in args, and whether found.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		a = "-" + strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(a, "-"+name+"="); ok {
			return v, true
		}
		if a == "-"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// DaemonSpec says what to run on a host, and how.
type DaemonSpec struct {
	Binary string // weftd, flanneld or another flanneld-compatible daemon
	// Backend, unless empty, is the backend type the network config under the
	// daemon's prefix must have: a config of another type is replaced first (and its
	// leases dropped).
	Backend string
	// Weft gives the daemon weftd's --lease-state-file of its own (the default path
	// would be shared by every host of the lab).
	Weft bool
	// NoEtcd leaves out the --etcd-endpoints and --etcd-prefix flags (Kubernetes
	// subnet manager).
	NoEtcd bool
	// NoIface leaves out --iface=eth0: the daemon chooses its interface from Args
	// (--iface-regex, --iface-can-reach) or the default route.
	NoIface bool
	// Bare runs Binary with Args alone, none of the lab's flags: for a process that
	// is not flanneld-compatible (the socat reference).
	Bare bool
	Args []string // more flags, last: they override the lab's
	Env  []string // added to the environment
	// Emulator, when set, runs Binary under this program (qemu-user for a binary of
	// another architecture: "/usr/bin/qemu-aarch64-static"), which takes the
	// binary's path and arguments as its own. qemu-user emulates in its own process,
	// so Pid, Stop and Kill reach the daemon.
	Emulator string
}

// StartDaemon runs binary, a flanneld-compatible daemon, on h with flanneld's flags:
// etcd at EtcdEndpoints (with the certificates of a TLS etcd), prefix
// lease.DefaultPrefix, --iface=eth0, its own subnet file, healthz off. extraArgs come last, so they override (an --etcd-prefix there is
// honoured). Unless backendType is empty, the network config under the prefix is
// first set to that type when it holds another (dropping stale leases). Wait for the
// lease with WaitSubnetEnv.
func (l *Lab) StartDaemon(ctx context.Context, h *Host, binary, backendType string, extraArgs ...string) (*Daemon, error) {
	return l.Start(ctx, h, DaemonSpec{Binary: binary, Backend: backendType, Args: extraArgs})
}

// StartWeftd is StartDaemon for weftd: it also gives it a lease state file of its own.
func (l *Lab) StartWeftd(ctx context.Context, h *Host, binary, backendType string, extraArgs ...string) (*Daemon, error) {
	return l.Start(ctx, h, DaemonSpec{Binary: binary, Backend: backendType, Weft: true, Args: extraArgs})
}

// Start runs the daemon of spec on h (see StartDaemon for the flags it gets). Every
// daemon of one binary on one host shares a directory: a daemon started again after
// Stop finds the subnet.env and state file of the one before, as after a restart, and
// its log goes on in the same file. Close stops it.
func (l *Lab) Start(ctx context.Context, h *Host, spec DaemonSpec) (*Daemon, error) {
	prefix := lease.DefaultPrefix
	if p, ok := flagValue(spec.Args, "etcd-prefix"); ok {
		prefix = p
	}
	if spec.Backend != "" {
		if err := l.ensureBackend(ctx, prefix, spec.Backend); err != nil {
			return nil, err
		}
	}
	abs, err := exec.LookPath(spec.Binary)
	if err != nil {
		return nil, fmt.Errorf("daemon for %s: %w", h.Name, err)
	}
	if abs, err = filepath.Abs(abs); err != nil {
		return nil, fmt.Errorf("daemon for %s: %w", h.Name, err)
	}
	dir := filepath.Join(l.dir, h.Name+"-"+filepath.Base(abs))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("daemon dir: %w", err)
	}
	d := &Daemon{Host: h, Binary: abs, Prefix: prefix, Dir: dir, LogPath: filepath.Join(dir, "daemon.log"), done: make(chan struct{})}
	logf, err := os.OpenFile(d.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("daemon log: %w", err)
	}
	defer logf.Close()
	args := []string{"netns", "exec", h.NS.Name, abs}
	if spec.Emulator != "" {
		args = []string{"netns", "exec", h.NS.Name, spec.Emulator, abs}
	}
	if !spec.NoEtcd && !spec.Bare {
		args = append(args, l.etcdFlags()...)
		args = append(args, "--etcd-prefix="+lease.DefaultPrefix)
	}
	if !spec.NoIface && !spec.Bare {
		args = append(args, "--iface=eth0")
	}
	if !spec.Bare {
		args = append(args, "--subnet-file="+d.SubnetFile())
	}
	if spec.Weft && !spec.Bare {
		args = append(args, "--lease-state-file="+filepath.Join(dir, "lease-state.json"))
	}
	args = append(args, spec.Args...)
	d.cmd = exec.Command("ip", args...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.Dir = dir
	if len(spec.Env) > 0 {
		d.cmd.Env = append(os.Environ(), spec.Env...)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	if err := d.cmd.Start(); err != nil {
		l.mu.Unlock()
		return nil, fmt.Errorf("start %s on %s: %w", spec.Binary, h.Name, err)
	}
	l.daemons = append(l.daemons, d)
	l.mu.Unlock()
	go func() {
		err := d.cmd.Wait()
		d.err = fmt.Errorf("%w: %s on %s: %w", ErrDaemonExited, filepath.Base(abs), h.Name, err)
		close(d.done)
	}()
	l.saveState()
	l.log.Debug("daemon started", zap.String("host", h.Name), zap.String("binary", abs), zap.Int("pid", d.Pid()))
	return d, nil
}

func (l *Lab) ensureBackend(ctx context.Context, prefix, bt string) error {
	var cur struct{ Backend struct{ Type string } }
	body := fmt.Sprintf(`{"key":%q}`, b64(prefix+"/config"))
	var r struct {
		Kvs []struct{ Value string } `json:"kvs"`
	}
	if err := l.etcdDo(ctx, "POST", "/v3/kv/range", strings.NewReader(body), "application/json", &r); err != nil {
		return err
	}
	if len(r.Kvs) == 1 {
		if v, err := decodeB64(r.Kvs[0].Value); err == nil && jsonUnmarshal(v, &cur) == nil && cur.Backend.Type == bt {
			return nil
		}
	}
	return l.SetBackend(ctx, prefix, bt)
}

// WaitSubnetEnv waits until the daemon has written a valid subnet.env and returns it.
// It fails early, with the log's tail, when the daemon exits.
func (d *Daemon) WaitSubnetEnv(ctx context.Context, timeout time.Duration) (lease.SubnetEnv, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if env, err := lease.ReadSubnetEnv(d.SubnetFile()); err == nil {
			d.mu.Lock()
			d.env = env
			d.mu.Unlock()
			return env, nil
		}
		select {
		case <-d.done:
			return lease.SubnetEnv{}, fmt.Errorf("%w: %s (log %s)\n%s", d.err, d.LastError(), d.LogPath, d.LogTail(15))
		case <-ctx.Done():
			return lease.SubnetEnv{}, fmt.Errorf("%s on %s wrote no subnet.env: %w (log %s)\n%s",
				filepath.Base(d.Binary), d.Host.Name, ctx.Err(), d.LogPath, d.LogTail(15))
		case <-tick.C:
		}
	}
}

// Env is the subnet.env WaitSubnetEnv read last.
func (d *Daemon) Env() lease.SubnetEnv {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.env
}

// Exited reports whether the daemon has ended, and why.
func (d *Daemon) Exited() (bool, error) {
	select {
	case <-d.done:
		return true, d.err
	default:
		return false, nil
	}
}

// ExitCode is the daemon's exit status once it has ended (ok false before; -1 when
// a signal ended it).
func (d *Daemon) ExitCode() (code int, ok bool) {
	select {
	case <-d.done:
		return d.cmd.ProcessState.ExitCode(), true
	default:
		return 0, false
	}
}

// LastError returns the last log line, shortened to its "msg" and "error" fields
// when it is a JSON (zap) line.
func (d *Daemon) LastError() string {
	line := d.LogTail(1)
	var j struct{ Msg, Error string }
	if jsonUnmarshal([]byte(line), &j) == nil && j.Msg != "" {
		if j.Error != "" {
			return j.Msg + ": " + j.Error
		}
		return j.Msg
	}
	return line
}

// Log returns the daemon's whole log (with those of the daemons before it on the host,
// see Start).
func (d *Daemon) Log() string {
	data, _ := os.ReadFile(d.LogPath)
	return string(data)
}

// LogTail returns the last n lines of the daemon's log.
func (d *Daemon) LogTail(n int) string {
	data, _ := os.ReadFile(d.LogPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Stop ends the daemon: SIGTERM, then SIGKILL after 15 s. Stopping twice is fine.
func (d *Daemon) Stop() error {
	if d.cmd == nil || d.cmd.Process == nil {
		return nil
	}
	select {
	case <-d.done:
		return nil
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(15 * time.Second):
	}
	_ = d.cmd.Process.Kill()
	select {
	case <-d.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("daemon pid %d on %s does not die", d.Pid(), d.Host.Name)
	}
}

// Kill ends the daemon with SIGKILL, as a crash would, and waits for it; what it
// made (devices, rules, its lease) stays behind.
func (d *Daemon) Kill() error {
	if d.cmd == nil || d.cmd.Process == nil {
		return nil
	}
	_ = d.cmd.Process.Kill()
	select {
	case <-d.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("daemon pid %d on %s does not die", d.Pid(), d.Host.Name)
	}
}

// CPUTime returns the user+system CPU time the daemon has used so far.
func (d *Daemon) CPUTime() (time.Duration, error) { return ProcCPU(d.Pid()) }
