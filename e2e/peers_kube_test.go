package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/weftnet/weft/bench/kubetest"
	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/paths"
)

// peersCondition is the node condition weftd keeps (daemon.PeersConditionType).
const peersCondition corev1.NodeConditionType = "WeftPeersReachable"

// TestPeersKubeCondition: weftd --kube-subnet-mgr on vxlan, on three nodes, as
// kube-flannel's ServiceAccount (deploy/rbac.yml). Node a gets the condition
// WeftPeersReachable True once its peers answer; with UDP 8472 dropped on b's underlay
// it turns False naming b's subnet as encap-blocked on UDP 8472 (GET /peers agrees,
// c stays up); without the rule it is True again. The kubelet's conditions on the
// node stay as they were, and weftd had no right beyond deploy/rbac.yml's.
func TestPeersKubeCondition(t *testing.T) {
	testenv.NeedTools(t, "nft")
	c := newCluster(t, "v3")
	_, cs, id := kubeCluster(t, c)
	conf := netConf(t, "vxlan")
	cidrs := map[string]string{"a": "198.18.10.0/24", "b": "198.18.20.0/24", "c": "198.18.30.0/24"}
	lans := map[string]string{"a": "lan1", "b": "lan2", "c": "lan2"}
	for name, cidr := range cidrs {
		createNode(t, cs, "node-"+name, cidr)
	}
	kubelet := kubeletConditions(t, cs, "node-a")
	// a starts last, so that it knows both peers from its first list of the nodes.
	hosts := map[string]*host{}
	for _, name := range []string{"b", "c", "a"} {
		h := c.addHost(name, lans[name])
		hosts[name] = h
		c.startKubeProbing(h, cs, id, conf)
		c.waitSubnetEnv(h)
	}
	a, b := hosts["a"], hosts["b"]

	up := waitPeersCondition(t, cs, 60*time.Second, corev1.ConditionTrue, "PeersReachable", "2 of 2 peers reachable")
	waitPeers(t, a, map[string]string{cidrs["b"]: paths.StateUp, cidrs["c"]: paths.StateUp})

	unblock := c.dropVXLAN(b)
	start := time.Now()
	down := waitPeersCondition(t, cs, 30*time.Second, corev1.ConditionFalse, "PeersDown",
		"1 of 2 peers down: "+cidrs["b"]+" encap-blocked UDP 8472")
	t.Logf("condition False %v after the drop rule", time.Since(start).Round(100*time.Millisecond))
	rep := waitPeers(t, a, map[string]string{cidrs["b"]: paths.StateDown, cidrs["c"]: paths.StateUp})
	if p := rep.Peers[0]; p.Reason != paths.ReasonEncap || !strings.Contains(p.Detail, "UDP 8472") ||
		p.PublicIP != b.ip || p.Endpoint != b.ip+":8472" {
		t.Errorf("a's GET /peers for b: %+v, want reason %s, detail naming UDP 8472, endpoint %s:8472", p, paths.ReasonEncap, b.ip)
	}

	// weftd status, with weftd's own rights (kube-flannel's ClusterRole), names the
	// node and the peer it cannot reach, and exits 1.
	out, code := weftdStatus(t, c, a, id)
	t.Logf("weftd status with b's VXLAN blocked (exit %d):\n%s", code, out)
	if code != 1 || !strings.Contains(out, "node-a cannot reach "+cidrs["b"]+" encap-blocked UDP 8472") {
		t.Errorf("weftd status with b's VXLAN blocked: exit %d, want 1 and node-a's problem named:\n%s", code, out)
	}
	statusJSON(t, c, a, id, b.ip)

	unblock()
	start = time.Now()
	again := waitPeersCondition(t, cs, 30*time.Second, corev1.ConditionTrue, "PeersReachable", "2 of 2 peers reachable")
	t.Logf("condition True %v after the rule went", time.Since(start).Round(100*time.Millisecond))
	waitPeers(t, a, map[string]string{cidrs["b"]: paths.StateUp, cidrs["c"]: paths.StateUp})

	// Each flip is a transition; the daemon patches a flip at most every 10 s (the
	// times are whole seconds).
	if !down.LastTransitionTime.After(up.LastTransitionTime.Time) ||
		again.LastTransitionTime.Sub(down.LastTransitionTime.Time) < 9*time.Second {
		t.Errorf("transitions at %v (True), %v (False), %v (True): want each later, the last two 10 s apart",
			up.LastTransitionTime, down.LastTransitionTime, again.LastTransitionTime)
	}
	// Every node's condition flips back (each at most conditionFlipEvery after its
	// last patch): then weftd status exits 0.
	eventually(t, 30*time.Second, func() error {
		if out, code := weftdStatus(t, c, a, id); code != 0 || !strings.Contains(out, "3 of 3 reporting reach every peer") {
			return fmt.Errorf("weftd status exit %d:\n%s", code, out)
		}
		return nil
	})
	for typ, want := range kubelet {
		if got := findCondition(getNode(t, cs, "node-a"), typ); got == nil || !reflect.DeepEqual(*got, want) {
			t.Errorf("node-a condition %s changed: %+v, want %+v", typ, got, want)
		}
	}
	flannelRights(t, c, cs, id)
	for _, l := range strings.Split(a.logs(), "\n") {
		if strings.Contains(l, "node condition") {
			t.Log(l)
		}
	}
}

// startKubeProbing is startKube with probes every second (WEFT_PROBE_INTERVAL).
func (c *cluster) startKubeProbing(h *host, cs kubernetes.Interface, id kubetest.Identity, conf string) {
	c.t.Helper()
	pod := "kube-flannel-ds-" + h.name
	kubetest.Pod(c.t, cs, pod, "node-"+h.name)
	c.run(h, lab.DaemonSpec{Binary: c.bin, Weft: true, NoEtcd: true,
		Env: []string{"POD_NAME=" + pod, "POD_NAMESPACE=" + kubetest.Namespace, "WEFT_PROBE_INTERVAL=1s"},
		Args: []string{"--healthz-ip=127.0.0.1", "--healthz-port=8475",
			"--kube-subnet-mgr", "--kubeconfig-file=" + id.Kubeconfig, "--net-config-path=" + conf}})
}

// dropVXLAN drops VXLAN (UDP 8472) arriving on h's underlay, in a table of its own,
// and returns what removes it (also run at cleanup; the namespace goes after it).
func (c *cluster) dropVXLAN(h *host) func() {
	c.t.Helper()
	const table = "weft_e2e_drop_vxlan"
	remove := func() {
		if out, err := h.ns.Run(context.Background(), "nft", "list", "table", "inet", table); err == nil {
			c.sh(h.ns, "nft delete table inet "+table)
		} else if !strings.Contains(out, "No such file") {
			c.t.Errorf("%s: nft list table: %v: %s", h.name, err, out)
		}
	}
	c.t.Cleanup(remove)
	c.sh(h.ns, "nft 'add table inet "+table+"; add chain inet "+table+
		" in { type filter hook input priority -300; policy accept; }; add rule inet "+table+
		" in iifname \"eth0\" udp dport 8472 drop'")
	return remove
}

// waitPeersCondition waits until node-a's WeftPeersReachable condition has status,
// reason and message, and returns it.
func waitPeersCondition(t *testing.T, cs kubernetes.Interface, d time.Duration, status corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
	t.Helper()
	var got corev1.NodeCondition
	eventually(t, d, func() error {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := findCondition(n, peersCondition)
		if c == nil || c.Status != status || c.Reason != reason || c.Message != msg {
			all, _ := json.Marshal(n.Status.Conditions)
			return fmt.Errorf("node-a conditions %s, want %s %s %s %q", all, peersCondition, status, reason, msg)
		}
		got = *c
		return nil
	})
	return got
}

func findCondition(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// waitPeers waits until h's GET /peers lists exactly the subnets of want, each in its
// state, and returns the report (sorted by subnet).
func waitPeers(t *testing.T, h *host, want map[string]string) paths.Report {
	t.Helper()
	var rep paths.Report
	eventually(t, 30*time.Second, func() error {
		code, body, err := probe(h, "/peers")
		if err != nil {
			return err
		}
		rep = paths.Report{}
		if err := json.Unmarshal([]byte(body), &rep); err != nil || code != http.StatusOK {
			return fmt.Errorf("%s GET /peers: %d %q: %w", h.name, code, body, err)
		}
		got := map[string]string{}
		for _, p := range rep.Peers {
			got[p.Subnet] = p.State
		}
		if !reflect.DeepEqual(got, want) {
			return fmt.Errorf("%s GET /peers: %s, want states %v", h.name, body, want)
		}
		return nil
	})
	return rep
}

// kubeletConditions sets on node the conditions a kubelet keeps (as the admin, through
// nodes/status) and returns them as the API server stored them.
func kubeletConditions(t *testing.T, cs kubernetes.Interface, node string) map[corev1.NodeConditionType]corev1.NodeCondition {
	t.Helper()
	n := getNode(t, cs, node)
	at := metav1.NewTime(time.Now().Add(-time.Hour))
	n.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "kubelet is posting ready status", LastHeartbeatTime: at, LastTransitionTime: at},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory",
			Message: "kubelet has sufficient memory available", LastHeartbeatTime: at, LastTransitionTime: at},
	}
	n, err := cs.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[corev1.NodeConditionType]corev1.NodeCondition{}
	for _, c := range n.Status.Conditions {
		out[c.Type] = c
	}
	if len(out) != 2 {
		t.Fatalf("node %s conditions %+v, want Ready and MemoryPressure", node, n.Status.Conditions)
	}
	return out
}

// flannelRights checks that weftd's identity has kube-flannel's rights and no more:
// the ClusterRole on the server is deploy/rbac.yml's, and the ServiceAccount itself
// (asking with its own token) may do what that role grants and nothing it does not.
func flannelRights(t *testing.T, c *cluster, admin kubernetes.Interface, id kubetest.Identity) {
	t.Helper()
	ctx := context.Background()
	f, err := os.Open(kubetest.RBACFile(".."))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	objs, err := kubetest.ParseRBAC(f, false)
	if err != nil {
		t.Fatal(err)
	}
	role, err := admin.RbacV1().ClusterRoles().Get(ctx, objs.ClusterRole.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(role.Rules, objs.ClusterRole.Rules) {
		t.Errorf("ClusterRole %s on the server: %+v, want deploy/rbac.yml's %+v", role.Name, role.Rules, objs.ClusterRole.Rules)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", id.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dial = c.router.DialContext
	self, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		verb, resource, sub, ns string
		allowed                 bool
	}{
		{"get", "pods", "", kubetest.Namespace, true},
		{"get", "nodes", "", "", true},
		{"list", "nodes", "", "", true},
		{"watch", "nodes", "", "", true},
		{"patch", "nodes", "status", "", true},
		{"update", "nodes", "status", "", false},
		{"patch", "nodes", "", "", false},
		{"update", "nodes", "", "", false},
		{"create", "nodes", "", "", false},
		{"delete", "nodes", "", "", false},
		{"list", "pods", "", kubetest.Namespace, false},
		{"patch", "pods", "status", kubetest.Namespace, false},
		{"get", "secrets", "", kubetest.Namespace, false},
		{"create", "events", "", kubetest.Namespace, false},
	} {
		r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: tc.verb, Resource: tc.resource,
				Subresource: tc.sub, Namespace: tc.ns}}}
		res, err := self.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, r, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: self access review: %v", kubetest.User, err)
		}
		if res.Status.Allowed != tc.allowed {
			t.Errorf("%s may %s %s/%s in %q: %v, want %v", kubetest.User, tc.verb, tc.resource, tc.sub, tc.ns, res.Status.Allowed, tc.allowed)
		}
	}
}

// weftdStatus runs `weftd status --kube-subnet-mgr` on h with weftd's own identity
// (kube-flannel's rights) and returns its output and exit status.
func weftdStatus(t *testing.T, c *cluster, h *host, id kubetest.Identity, extra ...string) (string, int) {
	t.Helper()
	cmd := h.ns.Command(context.Background(), c.bin, append([]string{"status", "--kube-subnet-mgr", "--kubeconfig-file=" + id.Kubeconfig}, extra...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String() + errOut.String(), ee.ExitCode()
	}
	t.Fatalf("weftd status: %v", err)
	return "", 0
}

// statusJSON checks weftd status -o json: three nodes, node-a's backend, version and
// node-b's outside address, and the summary's count of nodes reaching every peer.
func statusJSON(t *testing.T, c *cluster, h *host, id kubetest.Identity, bIP string) {
	t.Helper()
	out, code := weftdStatus(t, c, h, id, "-o", "json")
	var st struct {
		Nodes []struct {
			Name, Backend, Outside, Version string
			Reported, Reachable             bool
		}
		Summary struct{ Nodes, Reporting, AllReachable int }
		Healthy bool
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 1 || st.Healthy {
		t.Fatalf("weftd status -o json: exit %d, %v:\n%s", code, err, out)
	}
	// node-a's condition is False (awaited); b's and c's flip on their own probes, each
	// at most conditionFlipEvery after its last patch, so they may not have yet.
	if len(st.Nodes) != 3 || st.Summary.Nodes != 3 || st.Summary.AllReachable > 2 {
		t.Errorf("weftd status -o json: %+v, want 3 nodes, node-a not reaching every peer", st)
	}
	for _, n := range st.Nodes {
		if n.Backend != "vxlan" || n.Version == "" || !n.Reported || n.Name == "node-b" && n.Outside != bIP ||
			n.Name == "node-a" && n.Reachable {
			t.Errorf("weftd status -o json: node %+v, want vxlan, a version, reported (node-a unreachable peers, node-b at %s)", n, bIP)
		}
	}
}
