// Package netns makes network namespaces that stand in for hosts in tests, the demo
// and benchmarks, and runs commands and Go code inside them.
package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
)

// ErrCommand wraps a failed command; the error text carries its output.
var ErrCommand = errors.New("command failed")

// NS is a named network namespace (as made by `ip netns add`).
type NS struct {
	Name string
}

// New makes a namespace named prefix-<random> with its loopback up.
func New(prefix string) (*NS, error) {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	n := &NS{Name: prefix + "-" + hex.EncodeToString(b[:])}
	if _, err := Run(context.Background(), "ip", "netns", "add", n.Name); err != nil {
		return nil, err
	}
	if _, err := n.Run(context.Background(), "ip", "link", "set", "lo", "up"); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// Run runs a command in the root namespace and returns its combined output.
func Run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%w: %s %s: %v: %s", ErrCommand, name,
			strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// Command returns a command that runs inside the namespace.
func (n *NS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Run runs a command inside the namespace and returns its combined output.
func (n *NS) Run(ctx context.Context, name string, args ...string) (string, error) {
	return Run(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Do runs f on an OS thread switched into the namespace.
func (n *NS) Do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return fmt.Errorf("current netns: %w", err)
	}
	defer orig.Close()
	h, err := netns.GetFromName(n.Name)
	if err != nil {
		return fmt.Errorf("netns %s: %w", n.Name, err)
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		return fmt.Errorf("enter netns %s: %w", n.Name, err)
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		// The thread is in the wrong namespace: do not let it be reused.
		runtime.Goexit()
	}
	return ferr
}

// Pids lists the processes running inside the namespace.
func (n *NS) Pids() []int {
	out, err := Run(context.Background(), "ip", "netns", "pids", n.Name)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// Close kills every process left in the namespace and deletes it (and so its links).
// Closing a namespace that is already gone does nothing.
func (n *NS) Close() error {
	if !Exists(n.Name) {
		return nil
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		pids := n.Pids()
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			_ = syscall.Kill(p, sig)
		}
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) && len(n.Pids()) > 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	_, err := Run(context.Background(), "ip", "netns", "del", n.Name)
	return err
}

// Veth links namespace a (interface aName) to namespace b (interface bName) and sets
// both ends up.
func Veth(a *NS, aName string, b *NS, bName string) error {
	ctx := context.Background()
	if _, err := Run(ctx, "ip", "link", "add", aName, "netns", a.Name, "type", "veth",
		"peer", "name", bName, "netns", b.Name); err != nil {
		return err
	}
	if _, err := a.Run(ctx, "ip", "link", "set", aName, "up"); err != nil {
		return err
	}
	_, err := b.Run(ctx, "ip", "link", "set", bName, "up")
	return err
}

// Exists reports whether a namespace of that name exists.
func Exists(name string) bool {
	out, err := Run(context.Background(), "ip", "netns", "list")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}

// DialContext dials from inside the namespace: the socket is made there, and keeps
// its namespace afterwards. It fits http.Transport.DialContext and gRPC's
// WithContextDialer (as func(ctx, addr) with network "tcp").
func (n *NS) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
		var err error
		c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}
