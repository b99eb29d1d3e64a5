package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/testenv"
)

// sdNode is Debian's systemd (/lib/systemd/systemd --system) as PID 1 of PID, mount,
// cgroup, UTS and IPC namespaces of its own, in a lab host's network namespace. Its
// root is an overlay over the machine's / whose upper layer is a tmpfs, so nothing it
// or its services write reaches the machine, and every write to the root file system
// shows in the upper layer. /run, /tmp and /dev are its own (a tmpfs each; /dev holds
// null, zero, full, random, urandom, tty and net/tun bound from the machine, and a
// devpts of its own), /proc/sys is read-only but for net/ (the host's namespace), /sys
// is read-only, and each cgroup v1 hierarchy is mounted at a cgroup of the test's
// own, below which systemd makes its slices. Capabilities that reach past the
// namespaces (modules, clocks, reboot, raw I/O, syslog) are out of its bounding set.
// It boots weft-test.target, which wants nothing: units start only when asked.
type sdNode struct {
	t      *testing.T
	cmd    *exec.Cmd
	pid    int    // systemd, PID 1 inside
	dir    string // where the tmpfs of the upper layer is mounted (inside only)
	cgroup string // the cgroup (every hierarchy) that holds all of it
	log    string
}

// sdInit runs as PID 1 of the new namespaces and becomes systemd. $1 is the tmpfs's
// mount point, $2 the cgroup hierarchies to mount.
const sdInit = `set -e
D=$1
mount --make-rprivate /
mount -t tmpfs -o mode=0755 weft-sd "$D"
mkdir "$D/upper" "$D/work" "$D/root"
mount -t overlay weft-sd -o "lowerdir=/,upperdir=$D/upper,workdir=$D/work" "$D/root"
R=$D/root
mount -t proc proc "$R/proc"
mount --bind "$R/proc/sys" "$R/proc/sys"
mount --bind "$R/proc/sys/net" "$R/proc/sys/net"
mount -o remount,bind,ro "$R/proc/sys"
mount -t sysfs -o ro sysfs "$R/sys"
mount -t tmpfs -o mode=0755 cgroup "$R/sys/fs/cgroup"
for h in $2; do
	mkdir "$R/sys/fs/cgroup/$h"
	case $h in
	unified) mount -t cgroup2 cgroup2 "$R/sys/fs/cgroup/$h" ;;
	systemd) mount -t cgroup -o none,name=systemd cgroup "$R/sys/fs/cgroup/$h" ;;
	*) mount -t cgroup -o "$h" cgroup "$R/sys/fs/cgroup/$h" ;;
	esac
done
mount -o remount,ro "$R/sys/fs/cgroup"
mount -t tmpfs -o mode=0755 dev "$R/dev"
mkdir "$R/dev/net" "$R/dev/pts" "$R/dev/shm"
for n in null zero full random urandom tty net/tun; do
	touch "$R/dev/$n"; mount --bind "/dev/$n" "$R/dev/$n"
done
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
mount -t tmpfs -o mode=1777 shm "$R/dev/shm"
mount -t tmpfs -o mode=0755 run "$R/run"
mount -t tmpfs -o mode=1777 tmp "$R/tmp"
mkdir -p "$R/etc/systemd/system"
printf '[Unit]\nDescription=weft test\n' > "$R/etc/systemd/system/weft-test.target"
exec chroot "$R" /lib/systemd/systemd --system --unit=weft-test.target
`

// sdOuter puts itself into the test's cgroup, then enters the network namespace and
// makes the others; unshare's child (PID 1) runs sdInit. $1 is the cgroup, $2 the
// network namespace's name, the rest sdInit's arguments.
const sdOuter = `cg=$1 ns=$2; shift 2
for h in /sys/fs/cgroup/*/; do [ -f "$h$cg/cgroup.procs" ] && echo $$ > "$h$cg/cgroup.procs"; done
exec env -i container=weft-test PATH=/usr/sbin:/usr/bin:/sbin:/bin \
	nsenter --net=/run/netns/"$ns" unshare --pid --fork --mount --cgroup --uts --ipc --kill-child \
	setpriv --bounding-set -sys_module,-sys_time,-sys_boot,-sys_rawio,-syslog,-wake_alarm,-block_suspend,-mac_admin,-mac_override,-sys_pacct \
	sh -c "$0" weft-sd-init "$@"
`

// startSystemd boots systemd in netns; t.Cleanup ends every process of it and removes
// its cgroups, on failure too.
func startSystemd(t *testing.T, netns string) *sdNode {
	t.Helper()
	testenv.NeedTools(t, "unshare", "nsenter", "setpriv", "chroot", "systemctl", "journalctl")
	_, err := os.Stat("/lib/systemd/systemd")
	testenv.Need(t, err == nil, "/lib/systemd/systemd (Debian's systemd package)")
	hs, err := cgroupV1()
	testenv.Need(t, err == nil, fmt.Sprintf("cgroup v1 hierarchies under /sys/fs/cgroup: %v", err))
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := &sdNode{t: t, cgroup: "weft-sd-" + hex.EncodeToString(b[:]), dir: t.TempDir(), log: filepath.Join(t.TempDir(), "systemd.log")}
	t.Cleanup(n.close)
	if err := n.makeCgroups(hs); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(n.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	n.cmd = exec.Command("sh", "-c", sdOuter, sdInit, n.cgroup, netns, n.dir, strings.Join(hs, " "))
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = n.cmd.Wait() }()
	// PID 1 is unshare's child (sh, then chroot, then systemd: one process).
	testenv.Eventually(t, 10*time.Second, func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", n.cmd.Process.Pid, n.cmd.Process.Pid))
		if err != nil {
			return err
		}
		if n.pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return fmt.Errorf("unshare's children %q: %w", b, err)
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", n.pid))
		if !strings.HasSuffix(exe, "/systemd") {
			return fmt.Errorf("PID 1 runs %q, not systemd yet", exe)
		}
		return nil
	})
	// Its private socket comes up first; then --wait waits for the boot to finish.
	testenv.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if out, err := n.run(ctx, "systemctl", "is-system-running", "--wait"); err != nil || strings.TrimSpace(out) != "running" {
			return fmt.Errorf("systemd as PID 1: is-system-running %q: %w", out, err)
		}
		return nil
	})
	return n
}

// run runs a command inside every namespace of systemd, at its root.
func (n *sdNode) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(n.pid), "-a", "-r", "-w"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// must runs a command inside and fails the test when it fails.
func (n *sdNode) must(args ...string) string {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := n.run(ctx, args...)
	if err != nil {
		n.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// show is a unit's property, as systemctl show gives it.
func (n *sdNode) show(unit, prop string) string {
	n.t.Helper()
	return strings.TrimSpace(n.must("systemctl", "show", "--value", "-p", prop, unit))
}

// root is the path of p in systemd's root, seen from outside.
func (n *sdNode) root(p string) string { return fmt.Sprintf("/proc/%d/root%s", n.pid, p) }

// tail is the end of what systemd and the namespaces' setup printed.
func (n *sdNode) tail() string {
	b, _ := os.ReadFile(n.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// files lists the regular files, sockets and links below the upper layer (what was
// written to the root file system) and below /run, /tmp and /var/tmp, each with its
// modification time and size, by path inside.
func (n *sdNode) files() map[string]string {
	n.t.Helper()
	out := map[string]string{}
	add := func(prefix, listing string) {
		s := bufio.NewScanner(strings.NewReader(listing))
		for s.Scan() {
			path, rest, ok := strings.Cut(s.Text(), "\t")
			if ok {
				out[prefix+path] = rest
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The upper layer is in the mount namespace's own root, outside systemd's chroot.
	up, err := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(n.pid), "-m",
		"find", n.dir+"/upper", "-mindepth", "1", "-not", "-type", "d", "-printf", "/%P\t%T@ %s %y\n").Output()
	if err != nil {
		n.t.Fatalf("list the upper layer: %v", err)
	}
	add("", string(up))
	add("", n.must("find", "/run", "/tmp", "/var/tmp", "-xdev", "-mindepth", "1", "-not", "-type", "d", "-printf", "%p\t%T@ %s %y\n"))
	return out
}

// close stops systemd (SIGKILL to PID 1 ends every process of its namespace), waits
// for the cgroups to empty and removes them.
func (n *sdNode) close() {
	if n.cmd != nil && n.cmd.Process != nil {
		if n.pid > 0 {
			_ = syscall.Kill(n.pid, syscall.SIGKILL)
		}
		_ = n.cmd.Process.Kill()
	}
	if err := removeCgroupTree(n.cgroup); err != nil {
		n.t.Errorf("systemd's cgroups: %v", err)
	}
	if n.t.Failed() {
		n.t.Logf("systemd's console (tail):\n%s", n.tail())
	}
}

// cgroupV1 lists the mounted cgroup v1 hierarchies by directory name ("systemd" is
// the named one systemd keeps its tree in; "unified", where the machine mounts
// cgroup2 beside them, is listed too: systemd then runs in hybrid mode).
func cgroupV1() ([]string, error) {
	ents, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil, err
	}
	var out []string
	sd := false
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", e.Name(), "cgroup.procs")); err == nil {
			out = append(out, e.Name())
			sd = sd || e.Name() == "systemd"
		}
	}
	if !sd {
		return nil, errors.New("no name=systemd hierarchy at /sys/fs/cgroup/systemd")
	}
	return out, nil
}

// makeCgroups makes the node's cgroup in every hierarchy (a cpuset with its parent's
// CPUs and memory nodes, which a new one lacks).
func (n *sdNode) makeCgroups(hs []string) error {
	for _, h := range hs {
		p := filepath.Join("/sys/fs/cgroup", h, n.cgroup)
		if err := os.Mkdir(p, 0o755); err != nil {
			return err
		}
		if h != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", h, f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(p, f), v, 0o644); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
	}
	return nil
}

// removeCgroupTree kills what is left in name (every hierarchy) and removes its
// cgroups, deepest first.
func removeCgroupTree(name string) error {
	hs, err := cgroupV1()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		root := filepath.Join("/sys/fs/cgroup", h, name)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := rmCgroup(dirs[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// rmCgroup kills the processes of one cgroup and removes it, retrying while the
// kernel still counts dying tasks (there is no event for that on cgroup v1).
func rmCgroup(dir string) error {
	var err error
	for i := 0; i < 200; i++ {
		if b, rerr := os.ReadFile(filepath.Join(dir, "cgroup.procs")); rerr == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, perr := strconv.Atoi(f); perr == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if err = syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		time.Sleep(25 * time.Millisecond)
	}
	return fmt.Errorf("rmdir %s: %w", dir, err)
}
