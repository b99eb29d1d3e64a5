package kubecluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The sysctls the kubelet sets; each node writes them into a file of its own.
var kubeletSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}

// The CNI plugins the flannel plugin delegates to, copied from Debian's
// containernetworking-plugins into the node's /opt/cni/bin (the DaemonSet adds flannel).
var cniPlugins = []string{"bridge", "host-local", "portmap", "loopback"}

const debianCNIDir = "/usr/lib/cni"

// startNode makes the node's directories, cgroups and mount namespace, then starts
// containerd, imports the images and starts the kubelet.
func (c *Cluster) startNode(ctx context.Context, n *Node, bin, tok string, images []string) error {
	mounts, err := prepareNodeDir(n.Dir, n.setup)
	if err != nil {
		return err
	}
	// The kubelet's cgroup root, and one for the node's own processes.
	for _, g := range []string{n.cgroup, n.cgroup + "-sys"} {
		if err := makeCgroups(g); err != nil {
			return err
		}
	}
	// Pods on the host network reach the API server as the kubernetes Service.
	if _, err := n.Host.NS.Run(ctx, n.iptables(), "-w", "-t", "nat", "-A", "OUTPUT", "-d", APIServiceIP, "-p", "tcp",
		"--dport", "443", "-j", "DNAT", "--to-destination", fmt.Sprintf("%s:%d", apiHost, apiPort)); err != nil {
		return err
	}
	enter, err := n.startHolder(mounts)
	if err != nil {
		return err
	}
	if err := n.startContainerd(ctx, enter, images); err != nil {
		return err
	}
	// The kubelet.
	kcfg := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(kcfg, []byte(kubeletConfig(n)), 0o644); err != nil {
		return err
	}
	kubeconfig, err := c.kubeconfig(n.Name, tok)
	if err != nil {
		return err
	}
	_, err = n.start("kubelet", append(enter, bin, "kubelet",
		"--config="+kcfg, "--kubeconfig="+kubeconfig,
		"--hostname-override="+n.Name, "--node-ip="+n.Host.Addr.String(),
		"--cert-dir=/var/lib/kubelet/pki"))
	return err
}

// prepareNodeDir makes the node's directories under d, copies the CNI plugins in and
// the kubelet's sysctls, and returns the mounts of its mount namespace.
func prepareNodeDir(d, setup string) (mounts []string, err error) {
	for _, sub := range []string{"run", "varlib", "varlog", "opt/cni/bin", "etc-up", "etc-work", "sys", "ctrd/root", "ctrd/state"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
			return nil, err
		}
	}
	plugins := cniPlugins
	if setup != "" {
		plugins = nil // the node's setup places them
	}
	for _, p := range plugins {
		data, err := os.ReadFile(filepath.Join(debianCNIDir, p))
		if err != nil {
			return nil, fmt.Errorf("CNI plugin (make deps installs containernetworking-plugins): %w", err)
		}
		if err := os.WriteFile(filepath.Join(d, "opt/cni/bin", p), data, 0o755); err != nil {
			return nil, err
		}
	}
	mounts = []string{
		"mount --bind " + d + "/run /run",
		"mount --bind " + d + "/varlib /var/lib",
		"mount --bind " + d + "/varlog /var/log",
		"mount --bind " + d + "/opt /opt",
		"mount -t overlay overlay -o lowerdir=/etc,upperdir=" + d + "/etc-up,workdir=" + d + "/etc-work /etc",
		"mkdir -p /etc/cni/net.d /var/lib/kubelet /var/log/pods /var/log/containers /run/flannel",
	}
	if setup != "" {
		mounts = append(mounts, setup)
	}
	for _, s := range kubeletSysctls {
		f := filepath.Join(d, "sys", strings.ReplaceAll(s, "/", "."))
		v, err := os.ReadFile(filepath.Join("/proc/sys", s))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(f, v, 0o644); err != nil {
			return nil, err
		}
		mounts = append(mounts, "mount --bind "+f+" /proc/sys/"+s)
	}
	return mounts, nil
}

// startHolder starts the holder, the process that keeps the node's private mount
// namespace (with mounts done), in the node's own cgroup, and returns the command
// prefix that enters the node's mount and network namespaces.
func (n *Node) startHolder(mounts []string) (enter []string, err error) {
	script := "set -e\n" + strings.Join(mounts, "\n") + "\necho ready\nexec sleep infinity\n"
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script)
	holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := holder.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	holder.Stderr = &stderr
	if err := holder.Start(); err != nil {
		return nil, fmt.Errorf("mount namespace: %w", err)
	}
	n.holder = &proc{name: "holder", cmd: holder, done: make(chan struct{})}
	joinErr := joinCgroups(n.cgroup+"-sys", holder.Process.Pid)
	// Wait only once the pipe has been read from (os/exec's rule).
	line, err := readLine(out)
	go func() { n.holder.err = holder.Wait(); close(n.holder.done) }()
	if err != nil || line != "ready" {
		<-n.holder.done
		return nil, fmt.Errorf("mount namespace: %q %v: %s", line, err, stderr.String())
	}
	if joinErr != nil {
		return nil, joinErr
	}
	enter = []string{"nsenter", fmt.Sprintf("--mount=/proc/%d/ns/mnt", holder.Process.Pid), "--net=/run/netns/" + n.Host.NS.Name, "--"}
	if n.LegacyIPTables {
		path, err := legacyPath(n.Dir)
		if err != nil {
			return nil, err
		}
		enter = append(enter, "env", "PATH="+path)
	}
	return enter, nil
}

// startContainerd starts the node's containerd through enter, waits for it to answer
// and imports images.
func (n *Node) startContainerd(ctx context.Context, enter, images []string) error {
	cfg := filepath.Join(n.Dir, "containerd.toml")
	if err := os.WriteFile(cfg, []byte(containerdConfig(n.Dir, n.Sock)), 0o644); err != nil {
		return err
	}
	ctrd, err := n.start("containerd", append(enter, "containerd", "--config", cfg))
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := n.Ctr(ctx, "version"); err == nil {
			break
		} else if ctrd.exited() || time.Now().After(deadline) {
			return fmt.Errorf("containerd did not answer: %w\n%s", err, ctrd.tail(20))
		}
		time.Sleep(100 * time.Millisecond) // polling a socket: no event to wait on
	}
	for _, img := range images {
		if out, err := n.Ctr(ctx, "-n", "k8s.io", "images", "import", img); err != nil {
			return fmt.Errorf("import %s: %w: %s", img, err, out)
		}
	}
	return nil
}

// start runs one of the node's processes in the node's cgroup.
func (n *Node) start(name string, args []string) (*proc, error) {
	p, err := startProc(name, filepath.Join(n.Dir, name+".log"), args)
	if err != nil {
		return nil, err
	}
	n.procs = append(n.procs, p)
	if err := joinCgroups(n.cgroup+"-sys", p.cmd.Process.Pid); err != nil {
		return p, err
	}
	return p, nil
}

// Ctr runs ctr against the node's containerd.
func (n *Node) Ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"-a", n.Sock}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// TaskPid is the host pid of a running container of the node (by its id, as
// in a pod's status without the containerd:// prefix).
func (n *Node) TaskPid(ctx context.Context, id string) (int, error) {
	out, err := n.Ctr(ctx, "-n", "k8s.io", "tasks", "ls")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == id && f[2] == "RUNNING" {
			var pid int
			if _, err := fmt.Sscanf(f[1], "%d", &pid); err == nil {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("node %s: no running task %s:\n%s", n.Name, id, out)
}

// stop ends the kubelet, then everything left in the node's cgroups (pods, shims,
// containerd, the holder), which also ends its mount namespace, then removes the
// cgroups.
func (n *Node) stop() error {
	for i := len(n.procs) - 1; i >= 0; i-- {
		if n.procs[i].name == "kubelet" {
			n.procs[i].stop()
		}
	}
	var errs []error
	for _, g := range []string{n.cgroup, n.cgroup + "-sys"} {
		if err := removeCgroups(g); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range append(n.procs, n.holder) {
		if p != nil {
			p.stop()
		}
	}
	return errors.Join(errs...)
}

func containerdConfig(d, sock string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
`, filepath.Join(d, "ctrd/root"), filepath.Join(d, "ctrd/state"), sock, sock+".ttrpc", PauseImage)
}

// kubeletConfig: cgroupfs under the node's own root, no eviction or image garbage
// collection (the imported images cannot be pulled again), anonymous read of the
// kubelet's API inside the lab only.
func kubeletConfig(n *Node) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
readOnlyPort: 0
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupRoot: /%[2]s
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[3]s
podLogsDir: /var/log/pods
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
serializeImagePulls: false
`, n.Host.Addr, n.cgroup, n.Sock)
}
