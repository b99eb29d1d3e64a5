package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/weftnet/weft/bench/kubecluster"
	"github.com/weftnet/weft/bench/testenv"
)

// TestDaemonSet runs a real two-node Kubernetes (bench/kubecluster: kube-apiserver,
// kube-controller-manager allocating the podCIDRs, kube-scheduler, and per node
// Debian's containerd and a kubelet), applies deploy/weft.yml with the image of
// `make image` loaded on both nodes, and checks, per backend: both nodes Ready with
// NetworkUnavailable cleared by weftd, the DaemonSet's pods Ready through their
// probes, and two pods on different nodes that ping each other and move TCP data.
func TestDaemonSet(t *testing.T) {
	image := daemonSetPrereqs(t)
	for _, backend := range []string{"vxlan", "udp"} {
		t.Run(backend, func(t *testing.T) { daemonSet(t, image, backend) })
	}
}

// daemonSetPrereqs checks what a cluster needs and returns weft's image archive.
func daemonSetPrereqs(t *testing.T) string {
	t.Helper()
	testenv.NeedRoot(t)
	testenv.NeedTools(t, "go", "containerd", "runc", "ctr", "nsenter", "unshare", "iptables", "ping", "etcd")
	image := filepath.Join(os.Getenv("WEFT_BIN"), "weftd-image.tar")
	_, err := os.Stat(image)
	testenv.Need(t, os.Getenv("WEFT_BIN") != "" && err == nil, "WEFT_BIN/weftd-image.tar (make image; set WEFT_BIN)")
	_, err = os.Stat("/usr/lib/cni/bridge")
	testenv.Need(t, err == nil, "/usr/lib/cni/bridge (make deps installs containernetworking-plugins)")
	_, err = os.Stat("/sys/fs/cgroup/pids/cgroup.procs")
	testenv.Need(t, err == nil, "cgroup v1 hierarchies under /sys/fs/cgroup (the cluster's nodes use cgroupfs v1)")
	return image
}

func daemonSet(t *testing.T, image, backend string) {
	start := time.Now()
	c := kubecluster.Start(t, kubecluster.Options{RepoRoot: "..", Images: []string{image}})
	t.Logf("cluster up in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	applyManifest(t, ctx, c.Admin, filepath.Join("..", "deploy", "weft.yml"), dsNetConf(t, backend))
	checkNodes(t, ctx, c)
	checkDaemonSet(t, ctx, c.Admin, "weft")
	t.Logf("nodes and DaemonSet ready %v after start", time.Since(start).Round(time.Millisecond))

	a := runPod(t, ctx, c, "pod-a", c.Nodes[0])
	b := runPod(t, ctx, c, "pod-b", c.Nodes[1])
	pingPod(t, ctx, c.Admin, a, b)
	pingPod(t, ctx, c.Admin, b, a)
	tcpPods(t, a, b, 8<<20)
	tcpPods(t, b, a, 8<<20)
	t.Logf("%s: pods %s (%s) and %s (%s) ping each other and move TCP data; %v after start",
		backend, a.ip, c.Nodes[0].Name, b.ip, c.Nodes[1].Name, time.Since(start).Round(time.Millisecond))
	t.Run("rollout", func(t *testing.T) {
		sent, received, gap, handed := rollout(t, ctx, c, a, b)
		t.Logf("%s: rolling the DaemonSet to a new image: %d pings every 10 ms, %d answered, longest gap %v; %d of %d nodes handed over",
			backend, sent, received, gap, handed, len(c.Nodes))
		if backend == "vxlan" && received != sent {
			t.Errorf("vxlan: %d of %d pings lost while the DaemonSet rolled (the kernel keeps forwarding: want none)", sent-received, sent)
		}
		// udp: where each node's new pod took flannel0 over from the old one's weftd
		// (hand-over), the gap is a restart's, not a pod's replacement. A node whose old
		// pod was not Ready when the rollout reached it (a probe timed out on a loaded
		// machine) has it replaced the old way, deleted first, as maxSurge provides.
		if max := int(restartGapMax / pingInterval); backend == "udp" && handed == len(c.Nodes) && sent-received > max {
			t.Errorf("udp: %d of %d pings lost while the DaemonSet rolled by hand-over; at most %d (%v)", sent-received, sent, max, restartGapMax)
		}
		if received == 0 {
			t.Errorf("no ping answered during the rollout")
		}
		pingPod(t, ctx, c.Admin, a, b)
		tcpPods(t, a, b, 1<<20)
	})
	logMemory(t, c)
}

// dsNetConf edits the manifests' objects for the test cluster: net-conf.json gets the
// cluster's Network and the backend; for udp weftd is privileged (it opens
// /dev/net/tun; the manifest says so).
func dsNetConf(t *testing.T, backend string) func(kruntime.Object) bool {
	return func(obj kruntime.Object) bool {
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			o.Data["net-conf.json"] = fmt.Sprintf(`{"Network": %q, "Backend": {"Type": %q}}`, kubecluster.ClusterCIDR, backend)
			// cni-conf.json stays kube-flannel's, at cniVersion 1.0.0: the image's plugin
			// (cmd/weft-cni) speaks it. Fail loudly if the manifest ever stops saying so.
			if !strings.Contains(o.Data["cni-conf.json"], `"cniVersion": "1.0.0"`) {
				t.Fatalf("cni-conf.json is not kube-flannel's at cniVersion 1.0.0:\n%s", o.Data["cni-conf.json"])
			}
		case *appsv1.DaemonSet:
			if backend == "udp" {
				priv := true
				o.Spec.Template.Spec.Containers[0].SecurityContext.Privileged = &priv
			}
		}
		return true
	}
}

// applyManifest creates the objects of a manifest that edit keeps (edit may change
// them). An object that exists already is left as it is, as kubectl create does.
func applyManifest(t *testing.T, ctx context.Context, cs kubernetes.Interface, path string, edit func(kruntime.Object) bool) {
	t.Helper()
	for _, obj := range readManifest(t, path) {
		if !edit(obj) {
			continue
		}
		var err error
		switch o := obj.(type) {
		case *corev1.Namespace:
			_, err = cs.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ConfigMap:
			_, err = cs.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.DaemonSet:
			_, err = cs.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("%s: unexpected %T", path, obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: create %T: %v", path, obj, err)
		}
	}
}

// deleteManifest deletes every object of the manifest at path, as kubectl delete -f
// does (one already gone is fine).
func deleteManifest(t *testing.T, ctx context.Context, cs kubernetes.Interface, path string) {
	t.Helper()
	for _, obj := range readManifest(t, path) {
		var err error
		switch o := obj.(type) {
		case *corev1.Namespace:
			err = cs.CoreV1().Namespaces().Delete(ctx, o.Name, metav1.DeleteOptions{})
		case *rbacv1.ClusterRole:
			err = cs.RbacV1().ClusterRoles().Delete(ctx, o.Name, metav1.DeleteOptions{})
		case *rbacv1.ClusterRoleBinding:
			err = cs.RbacV1().ClusterRoleBindings().Delete(ctx, o.Name, metav1.DeleteOptions{})
		case *corev1.ServiceAccount:
			err = cs.CoreV1().ServiceAccounts(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
		case *corev1.ConfigMap:
			err = cs.CoreV1().ConfigMaps(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
		case *appsv1.DaemonSet:
			err = cs.AppsV1().DaemonSets(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
		default:
			t.Fatalf("%s: unexpected %T", path, obj)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("%s: delete %T: %v", path, obj, err)
		}
	}
}

// readManifest decodes the objects of the manifest at path.
func readManifest(t *testing.T, path string) []kruntime.Object {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := scheme.Codecs.UniversalDeserializer()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []kruntime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			if strings.Contains(err.Error(), "Object 'Kind' is missing") {
				continue // a document of comments only
			}
			t.Fatal(err)
		}
		objs = append(objs, obj)
	}
}

// await polls cond (the API has no event for "all of these are true") until it holds.
func await(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(context.Context) (bool, error) {
		ok, why := cond()
		last = why
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: %v; last: %s", what, err, last)
	}
}

// checkNodes waits for both nodes to be Ready with NetworkUnavailable False and
// distinct podCIDRs in the cluster CIDR.
func checkNodes(t *testing.T, ctx context.Context, c *kubecluster.Cluster) {
	t.Helper()
	cluster := netip.MustParsePrefix(kubecluster.ClusterCIDR)
	await(t, ctx, "nodes ready", func() (bool, string) {
		nodes, err := c.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(nodes.Items) != len(c.Nodes) {
			return false, fmt.Sprintf("%d nodes registered", len(nodes.Items))
		}
		cidrs := map[string]bool{}
		for _, n := range nodes.Items {
			p, err := netip.ParsePrefix(n.Spec.PodCIDR)
			if err != nil || !cluster.Contains(p.Addr()) || cidrs[n.Spec.PodCIDR] {
				return false, fmt.Sprintf("node %s podCIDR %q", n.Name, n.Spec.PodCIDR)
			}
			cidrs[n.Spec.PodCIDR] = true
			if st := condition(n.Status.Conditions, corev1.NodeReady); st != corev1.ConditionTrue {
				return false, fmt.Sprintf("node %s Ready %s", n.Name, st)
			}
			if st := condition(n.Status.Conditions, corev1.NodeNetworkUnavailable); st != corev1.ConditionFalse {
				return false, fmt.Sprintf("node %s NetworkUnavailable %q", n.Name, st)
			}
		}
		return true, ""
	})
}

func condition(cs []corev1.NodeCondition, typ corev1.NodeConditionType) corev1.ConditionStatus {
	for _, c := range cs {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// checkDaemonSet waits for one Ready weft pod per node (readiness is the /readyz
// probe) and checks that the pods run as the flannel ServiceAccount.
func checkDaemonSet(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string) {
	t.Helper()
	var ds *appsv1.DaemonSet
	await(t, ctx, "DaemonSet "+name+" ready", func() (bool, string) {
		var err error
		ds, err = cs.AppsV1().DaemonSets("kube-flannel").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if ds.Status.DesiredNumberScheduled != 2 || ds.Status.NumberReady != 2 {
			return false, fmt.Sprintf("desired %d ready %d", ds.Status.DesiredNumberScheduled, ds.Status.NumberReady)
		}
		return true, ""
	})
	pods, err := cs.CoreV1().Pods("kube-flannel").List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector)})
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, p := range pods.Items {
		nodes[p.Spec.NodeName] = true
		if p.Spec.ServiceAccountName != "flannel" {
			t.Errorf("pod %s runs as %q, want the flannel ServiceAccount", p.Name, p.Spec.ServiceAccountName)
		}
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		if !ready || len(p.Status.ContainerStatuses) != 1 || !p.Status.ContainerStatuses[0].Ready {
			t.Errorf("pod %s not ready: %+v", p.Name, p.Status.Conditions)
		}
	}
	if len(nodes) != 2 {
		t.Errorf("%s pods on nodes %v, want one on each", name, nodes)
	}
}

// pod is a running test pod and its network namespace.
type pod struct {
	name string
	ip   netip.Addr
	pid  int // a process in the pod's network namespace
}

// runPod starts a test pod on node n and waits until it runs with an address from
// the node's podCIDR.
func runPod(t *testing.T, ctx context.Context, c *kubecluster.Cluster, name string, n *kubecluster.Node) pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": n.Name},
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "main", Image: kubecluster.PauseImage, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
	if _, err := c.Admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	await(t, ctx, "pod "+name+" running", func() (bool, string) {
		var err error
		got, err = c.Admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if got.Status.Phase != corev1.PodRunning || got.Status.PodIP == "" || len(got.Status.ContainerStatuses) != 1 ||
			got.Status.ContainerStatuses[0].ContainerID == "" {
			return false, fmt.Sprintf("phase %s, ip %q; events: %s", got.Status.Phase, got.Status.PodIP, podEvents(ctx, c.Admin, name))
		}
		return true, ""
	})
	node, err := c.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr(got.Status.PodIP)
	if cidr := netip.MustParsePrefix(node.Spec.PodCIDR); got.Spec.NodeName != n.Name || !cidr.Contains(ip) {
		t.Fatalf("pod %s on %s with %s, want on %s in %s", name, got.Spec.NodeName, ip, n.Name, cidr)
	}
	id := strings.TrimPrefix(got.Status.ContainerStatuses[0].ContainerID, "containerd://")
	pid, err := n.TaskPid(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return pod{name: name, ip: ip, pid: pid}
}

// podEvents are the reasons and messages of a pod's events, for failure messages.
func podEvents(ctx context.Context, cs kubernetes.Interface, name string) string {
	evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Reason+": "+e.Message)
	}
	return strings.Join(out, "; ")
}

// pingPod runs the real ping in from's network namespace to to's address. On a loss
// it logs what the network daemons' pods went through, to tell a data-path loss from
// a daemon restart.
func pingPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, from, to pod) {
	t.Helper()
	out, err := exec.CommandContext(ctx, "nsenter", fmt.Sprintf("--net=/proc/%d/ns/net", from.pid),
		"ping", "-c", "3", "-i", "0.2", "-W", "2", to.ip.String()).CombinedOutput()
	if err != nil {
		logNetPods(t, ctx, cs)
		t.Fatalf("ping %s -> %s: %v\n%s", from.name, to.name, err, out)
	}
	if !strings.Contains(string(out), " 0% packet loss") {
		logNetPods(t, ctx, cs)
		t.Errorf("ping %s -> %s lost packets:\n%s", from.name, to.name, out)
	}
}

// logNetPods logs each kube-flannel pod's restarts, last termination and log tail.
func logNetPods(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	t.Helper()
	pods, err := cs.CoreV1().Pods("kube-flannel").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("kube-flannel pods: %v", err)
		return
	}
	tail := int64(40)
	for _, p := range pods.Items {
		for _, st := range p.Status.ContainerStatuses {
			t.Logf("pod %s on %s, container %s: %d restarts, last termination %+v",
				p.Name, p.Spec.NodeName, st.Name, st.RestartCount, st.LastTerminationState.Terminated)
			logs, err := cs.CoreV1().Pods("kube-flannel").GetLogs(p.Name, &corev1.PodLogOptions{Container: st.Name, TailLines: &tail}).DoRaw(ctx)
			if err != nil {
				t.Logf("  logs: %v", err)
				continue
			}
			t.Logf("  log tail:\n%s", logs)
		}
	}
}

// inNetns runs f on a thread in the network namespace of pid (sockets f makes stay there).
func inNetns(pid int, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := vnetns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	target, err := vnetns.GetFromPid(pid)
	if err != nil {
		return err
	}
	defer target.Close()
	if err := vnetns.Set(target); err != nil {
		return err
	}
	defer func() {
		if err := vnetns.Set(orig); err != nil {
			panic(fmt.Sprintf("cannot return to the test's network namespace: %v", err))
		}
	}()
	return f()
}

// tcpPods sends size random bytes over TCP from a socket in from's namespace to a
// listener in to's, and checks that the digest of what arrived matches.
func tcpPods(t *testing.T, from, to pod, size int) {
	t.Helper()
	var ln net.Listener
	if err := inNetns(to.pid, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(to.ip, 5201).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan [32]byte, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			close(got)
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		h := sha256.New()
		_, _ = io.Copy(h, conn)
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		got <- sum
	}()
	payload := make([]byte, size)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	var conn net.Conn
	if err := inNetns(from.pid, func() (err error) {
		conn, err = (&net.Dialer{Timeout: 5 * time.Second}).Dial("tcp", netip.AddrPortFrom(to.ip, 5201).String())
		return err
	}); err != nil {
		t.Fatalf("TCP %s -> %s: %v", from.name, to.name, err)
	}
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	if _, err := conn.Write(payload); err != nil {
		t.Fatalf("TCP %s -> %s: %v", from.name, to.name, err)
	}
	conn.Close()
	sum, ok := <-got
	if want := sha256.Sum256(payload); !ok || sum != want {
		t.Fatalf("TCP %s -> %s: %d bytes sent, what arrived differs", from.name, to.name, size)
	}
}

// rollout moves the DaemonSet to a new image (the same image under a second tag) while
// a pings b every 10 ms, and returns what ping saw: sent, received and the longest
// run of lost replies, and on how many nodes the new pod found the old pod's weftd
// running and took over from it (the hand-over of a rolling update with maxSurge).
func rollout(t *testing.T, ctx context.Context, c *kubecluster.Cluster, a, b pod) (sent, received int, gap time.Duration, handed int) {
	t.Helper()
	ds, err := c.Admin.AppsV1().DaemonSets("kube-flannel").Get(ctx, "weft", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The manifest pins name:tag@digest; containerd has the image under name:tag.
	old, _, _ := strings.Cut(ds.Spec.Template.Spec.Containers[0].Image, "@")
	next := old + "-next"
	for _, n := range c.Nodes {
		if out, err := n.Ctr(ctx, "-n", "k8s.io", "images", "tag", old, next); err != nil {
			t.Fatalf("%s: %v: %s", n.Name, err, out)
		}
	}
	p := startPing(t, ctx, a, b)
	defer p.kill()
	for i := range ds.Spec.Template.Spec.InitContainers {
		ds.Spec.Template.Spec.InitContainers[i].Image = next
	}
	ds.Spec.Template.Spec.Containers[0].Image = next
	if ds, err = c.Admin.AppsV1().DaemonSets("kube-flannel").Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitRolled(t, ctx, c, ds.Generation, next)
	sent, received, gap = p.stop(t, ctx)
	// The DaemonSet rolls with maxSurge: each new pod started beside the old one and
	// found its weftd running.
	pods, err := c.Admin.CoreV1().Pods("kube-flannel").List(ctx, metav1.ListOptions{LabelSelector: "app=weft"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		out, err := c.Admin.CoreV1().Pods("kube-flannel").GetLogs(p.Name, &corev1.PodLogOptions{Container: "weft"}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("logs of %s: %v", p.Name, err)
		}
		if strings.Contains(string(out), "asking it to hand over") {
			handed++
		} else {
			restarts := int32(-1)
			if len(p.Status.ContainerStatuses) > 0 {
				restarts = p.Status.ContainerStatuses[0].RestartCount
			}
			t.Logf("pod %s on %s started after the old one's weftd had gone (no hand-over in its log; %d restarts):\n%s",
				p.Name, p.Spec.NodeName, restarts, out)
		}
	}
	return sent, received, gap, handed
}

// awaitRolled waits until the weft DaemonSet has observed generation gen and runs
// image on both nodes, every old pod gone.
func awaitRolled(t *testing.T, ctx context.Context, c *kubecluster.Cluster, gen int64, image string) {
	t.Helper()
	await(t, ctx, "rollout to "+image+" done", func() (bool, string) {
		got, err := c.Admin.AppsV1().DaemonSets("kube-flannel").Get(ctx, "weft", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := got.Status
		if s.ObservedGeneration < gen || s.UpdatedNumberScheduled != 2 || s.NumberReady != 2 || s.NumberAvailable != 2 {
			return false, fmt.Sprintf("%+v", s)
		}
		pods, err := c.Admin.CoreV1().Pods("kube-flannel").List(ctx, metav1.ListOptions{LabelSelector: "app=weft"})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if p.Spec.Containers[0].Image != image || p.DeletionTimestamp != nil {
				return false, "pod " + p.Name + " not replaced yet"
			}
		}
		return len(pods.Items) == 2, fmt.Sprintf("%d pods", len(pods.Items))
	})
}

// pinger is ping running from one pod to another every 10 ms.
type pinger struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

const pingInterval = 10 * time.Millisecond

// startPing starts ping from a to b and waits for its first 20 replies.
func startPing(t *testing.T, ctx context.Context, a, b pod) *pinger {
	t.Helper()
	p := &pinger{out: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command("nsenter", fmt.Sprintf("--net=/proc/%d/ns/net", a.pid),
		"ping", "-n", "-i", fmt.Sprint(pingInterval.Seconds()), "-W", "1", b.ip.String())
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	await(t, ctx, "first ping replies", func() (bool, string) { return p.replies() >= 20, p.out.String() })
	return p
}

func (p *pinger) replies() int { return strings.Count(p.out.String(), "bytes from") }

// kill ends ping if stop did not.
func (p *pinger) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// stop waits for another second of replies, ends ping and reads what it saw.
func (p *pinger) stop(t *testing.T, ctx context.Context) (sent, received int, gap time.Duration) {
	t.Helper()
	n := p.replies()
	await(t, ctx, "ping replies after the change", func() (bool, string) { return p.replies() >= n+100, "" })
	_ = p.cmd.Process.Signal(os.Interrupt)
	<-p.done
	return parsePing(t, p.out.String(), pingInterval)
}

// parsePing reads ping's summary and the longest run of sequence numbers without a
// reply among those sent.
func parsePing(t *testing.T, out string, interval time.Duration) (sent, received int, gap time.Duration) {
	t.Helper()
	seen := map[int]bool{}
	for _, line := range strings.Split(out, "\n") {
		if i := strings.Index(line, "icmp_seq="); i >= 0 && strings.Contains(line, "bytes from") {
			var seq int
			if _, err := fmt.Sscanf(line[i:], "icmp_seq=%d", &seq); err == nil {
				seen[seq] = true
			}
		}
		if strings.Contains(line, "packets transmitted") {
			if _, err := fmt.Sscanf(strings.TrimSpace(line), "%d packets transmitted, %d received", &sent, &received); err != nil {
				t.Fatalf("ping summary %q: %v", line, err)
			}
		}
	}
	if sent == 0 {
		t.Fatalf("no ping summary in:\n%s", out)
	}
	run, longest := 0, 0
	for seq := 1; seq <= sent; seq++ {
		if seen[seq] {
			run = 0
			continue
		}
		run++
		longest = max(longest, run)
	}
	return sent, received, time.Duration(longest) * interval
}

// syncBuffer is a bytes.Buffer a process writes while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// logMemory reports the peak memory of the nodes and the control plane.
func logMemory(t *testing.T, c *kubecluster.Cluster) {
	for _, n := range c.Nodes {
		if m, err := n.MaxMemory(); err == nil {
			t.Logf("node %s: peak memory %.0f MiB (containerd, kubelet, pods; page cache included)", n.Name, float64(m)/(1<<20))
		}
	}
	for name, m := range c.ControlPlaneMemory() {
		t.Logf("%s: peak resident %.0f MiB", name, float64(m)/(1<<20))
	}
}

func TestParsePing(t *testing.T) {
	out := `PING 198.18.1.2 (198.18.1.2) 56(84) bytes of data.
64 bytes from 198.18.1.2: icmp_seq=1 ttl=62 time=0.1 ms
64 bytes from 198.18.1.2: icmp_seq=2 ttl=62 time=0.1 ms
64 bytes from 198.18.1.2: icmp_seq=6 ttl=62 time=0.1 ms
64 bytes from 198.18.1.2: icmp_seq=7 ttl=62 time=0.1 ms

--- 198.18.1.2 ping statistics ---
8 packets transmitted, 4 received, 50% packet loss, time 70ms
`
	sent, received, gap := parsePing(t, out, 10*time.Millisecond)
	// 3, 4 and 5 are one run of three; 8 is the other.
	if sent != 8 || received != 4 || gap != 30*time.Millisecond {
		t.Errorf("sent %d received %d gap %v, want 8 4 30ms", sent, received, gap)
	}
}
