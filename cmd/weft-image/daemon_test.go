package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/bench/testenv"
)

// daemonProc is a daemon a test runs (containerd, dockerd) with its output in a log
// file. It is stopped at the test's end and on an interrupt (SIGTERM, SIGKILL after
// 20 s); the log's tail is shown when the test failed.
type daemonProc struct {
	name     string
	cmd      *exec.Cmd
	exited   chan struct{}
	err      error // why it exited, once exited is closed
	stopOnce sync.Once
}

// startDaemonProc starts cmd, which dies with the test binary (Pdeathsig).
func startDaemonProc(t *testing.T, name string, cmd *exec.Cmd, logPath string) *daemonProc {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	p := &daemonProc{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); logf.Close(); close(p.exited) }()
	testenv.OnInterrupt(t, name, p.stop)
	t.Cleanup(func() {
		start := time.Now()
		_ = p.stop()
		t.Logf("%s stopped in %v", name, time.Since(start).Round(time.Millisecond))
		if t.Failed() {
			if log, err := os.ReadFile(logPath); err == nil {
				t.Logf("%s log:\n%s", name, lastLines(string(log), 40))
			}
		}
	})
	return p
}

// stop sends SIGTERM, then SIGKILL if the daemon is still there 20 s later, and waits.
func (p *daemonProc) stop() error {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return nil
}

// await calls try until it succeeds, failing the test when the daemon exits first or
// timeout passes.
func (p *daemonProc) await(t *testing.T, timeout time.Duration, try func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.exited:
			t.Fatalf("%s exited: %v", p.name, p.err)
		default:
		}
		err := try()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer within %v: %v", p.name, timeout, err)
		}
		time.Sleep(100 * time.Millisecond) // polling a socket: there is no event to wait on
	}
}

// unmountUnder detaches every mount below dir, deepest first: the snapshots and
// container root file systems a daemon that was killed may leave.
func unmountUnder(dir string) error {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return err
	}
	var targets []string
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			targets = append(targets, f[1])
		}
	}
	var errs []error
	for i := len(targets) - 1; i >= 0; i-- {
		if err := unix.Unmount(targets[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", targets[i], err))
		}
	}
	return errors.Join(errs...)
}
