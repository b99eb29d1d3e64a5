package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftnet/weft/bench/kubeproc"
	"github.com/weftnet/weft/bench/kubetest"
	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
)

// ann is flanneld's default annotation prefix, as both daemons use it here.
const ann = "flannel.alpha.coreos.com/"

// kubePeer is another node, made by the test with the annotations a daemon on it
// would have published.
type kubePeer struct {
	name     string
	podCIDRs []string
	ann      map[string]string // under ann
	routed   bool              // its IPv4 subnet must show up in our routes
}

// kubeCompatCase is one input given alike to flanneld and weftd in Kubernetes mode:
// the net-conf.json, our node (its podCIDRs and annotations) and the peers' nodes.
type kubeCompatCase struct {
	name     string
	netConf  string
	podCIDRs []string          // of our node
	later    bool              // our node starts without podCIDRs; they come once the daemon runs
	selfAnn  map[string]string // more annotations on our node, under ann
	peers    []kubePeer
	bad      bool     // both must refuse: no subnet.env
	restart  bool     // stop and start again
	delLive  []string // peers deleted while the daemon runs (their routes must go)
	delDown  []string // peers deleted while it is stopped; then it starts again
}

// vxlanPeer is a vxlan peer at 192.0.2.<octet> with podCIDR 198.18.<octet>.0/24 (and,
// dual, fd00:db8:0:<octet>::/64 at 2001:db8:1::<octet>), routed.
func vxlanPeer(name string, octet int, dual bool) kubePeer {
	p := kubePeer{name: name, routed: true,
		podCIDRs: []string{fmt.Sprintf("198.18.%d.0/24", octet)},
		ann: map[string]string{
			"backend-data":        fmt.Sprintf(`{"VNI":1,"VtepMAC":"0e:00:00:00:02:%02x"}`, octet),
			"backend-type":        "vxlan",
			"kube-subnet-manager": "true",
			"public-ip":           fmt.Sprintf("192.0.2.%d", octet),
		}}
	if dual {
		p.podCIDRs = append(p.podCIDRs, fmt.Sprintf("fd00:db8:0:%x::/64", octet))
		p.ann["backend-v6-data"] = fmt.Sprintf(`{"VNI":1,"VtepMAC":"0e:00:00:00:06:%02x"}`, octet)
		p.ann["public-ipv6"] = fmt.Sprintf("2001:db8:1::%x", octet)
	}
	return p
}

// with returns p with annotations changed (an empty value removes one) and routed set.
func (p kubePeer) with(routed bool, kv ...string) kubePeer {
	a := map[string]string{}
	for k, v := range p.ann {
		a[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(a, kv[i])
		} else {
			a[kv[i]] = kv[i+1]
		}
	}
	p.ann, p.routed = a, routed
	return p
}

const (
	kubeVxlan  = `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan"}}`
	kubeHostGW = `{"Network":"198.18.0.0/16","Backend":{"Type":"host-gw"}}`
	kubeDual   = `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"vxlan"}}`
)

// kubeCompatCases: our node's podCIDR inside and outside Network, given late,
// dual-stack; our node's public-ip-overwrite; peers of another backend type, deleted
// while the daemon runs and while it is down, with malformed annotations (vxlan and
// host-gw).
var kubeCompatCases = []kubeCompatCase{
	{name: "kube-podcidr-inside", netConf: kubeVxlan, podCIDRs: []string{"198.18.1.0/24"},
		peers: []kubePeer{vxlanPeer("peer-a", 200, false)}, restart: true},
	{name: "kube-podcidr-outside", netConf: kubeVxlan, podCIDRs: []string{"10.244.2.0/24"},
		peers: []kubePeer{vxlanPeer("peer-a", 200, false)}, bad: true},
	{name: "kube-podcidr-later", netConf: kubeVxlan, podCIDRs: []string{"198.18.3.0/24"}, later: true,
		peers: []kubePeer{vxlanPeer("peer-a", 200, false)}},
	{name: "kube-dual-stack", netConf: kubeDual, podCIDRs: []string{"198.18.4.0/24", "fd00:db8:0:4::/64"},
		peers: []kubePeer{vxlanPeer("peer-a", 200, true)}, restart: true},
	{name: "kube-public-ip-overwrite", netConf: kubeVxlan, podCIDRs: []string{"198.18.5.0/24"},
		selfAnn: map[string]string{"public-ip-overwrite": "192.0.2.205"},
		peers:   []kubePeer{vxlanPeer("peer-a", 200, false)}},
	{name: "kube-peer-backend-type", netConf: kubeVxlan, podCIDRs: []string{"198.18.6.0/24"},
		peers: []kubePeer{
			vxlanPeer("peer-a", 200, false),
			// A node's backend-type decides, whatever its backend-data says.
			vxlanPeer("peer-host-gw", 201, false).with(false, "backend-type", "host-gw"),
			vxlanPeer("peer-udp", 202, false).with(false, "backend-type", "udp", "backend-data", "null"),
		}},
	{name: "kube-peer-deleted", netConf: kubeVxlan, podCIDRs: []string{"198.18.7.0/24"},
		peers:   []kubePeer{vxlanPeer("peer-a", 200, false), vxlanPeer("peer-live", 201, false), vxlanPeer("peer-down", 202, false)},
		delLive: []string{"peer-live"}, delDown: []string{"peer-down"}},
	{name: "kube-peer-malformed", netConf: kubeVxlan, podCIDRs: []string{"198.18.8.0/24"},
		peers: []kubePeer{
			vxlanPeer("peer-a", 200, false),
			vxlanPeer("peer-bad-ip", 201, false).with(false, "public-ip", "192.0.2.x"),
			vxlanPeer("peer-bad-data", 202, false).with(false, "backend-data", `{"VNI":1,"VtepMAC":`),
		}},
	// host-gw reads no backend data: a peer's bad or missing backend-data is no reason
	// to skip it.
	{name: "kube-peer-malformed-host-gw", netConf: kubeHostGW, podCIDRs: []string{"198.18.9.0/24"},
		peers: []kubePeer{
			hostGWPeer("peer-a", 200),
			hostGWPeer("peer-bad-ip", 201).with(false, "public-ip", "192.0.2.x"),
			hostGWPeer("peer-bad-data", 202).with(false, "backend-data", `{"VNI":1,"VtepMAC":`),
			hostGWPeer("peer-no-data", 203).with(false, "backend-data", ""),
		}},
}

// hostGWPeer is vxlanPeer for host-gw: type host-gw, backend-data null.
func hostGWPeer(name string, octet int) kubePeer {
	return vxlanPeer(name, octet, false).with(true, "backend-type", "host-gw", "backend-data", "null")
}

// kubeCompatAllowed are the differences between flanneld and weftd the Kubernetes
// cases accept (docs/compatibility.md lists them with compatAllowed's).
var kubeCompatAllowed = []allowedDiff{
	{id: "kube-outside-network-unannotated", cases: `kube-podcidr-outside`, item: `node annotation .*`,
		reason: "flanneld publishes our annotations and only then sees the podCIDR outside Network and exits; weftd refuses first: a refusing daemon advertises no lease peers would route to"},
	{id: "kube-waits-for-podcidr", cases: `kube-podcidr-later`, item: `before podCIDR: (daemon|readyz)`,
		reason: "without a podCIDR on our node flanneld exits with status 1 (the kubelet restarts it); weftd waits for it, running and not ready (/readyz 503 says why)"},
	{id: "kube-stale-peer-removed", cases: `kube-peer-deleted`, item: `after restart: (routes|neigh|fdb flannel\.1)`,
		reason: "a node deleted while the daemon was down: flanneld, started again, adds what the nodes ask for and never removes what they no longer do, so the old route, neighbour and fdb entry stay; weftd's start reconcile removes them"},
}

// kubeSide is one lab with its own etcd and kube-apiserver, running one daemon binary.
type kubeSide struct {
	name string
	bin  string
	weft bool
	lab  *lab.Lab
	srv  *kubeproc.Server
	cs   kubernetes.Interface
	id   kubetest.Identity
	dir  string
}

// TestCompatKubeWithFlanneld runs every kubeCompatCase in Kubernetes mode on two
// identical labs, one with the upstream flanneld, one with weftd, each with its own
// kube-apiserver (same node names, same host addresses), both as kube-flannel's
// ServiceAccount; cases run one after the other, both sides at once. It compares our
// node's annotations and NetworkUnavailable condition, subnet.env, devices, routes,
// neighbours, fdb, firewall rules, /readyz and how the daemon ends.
func TestCompatKubeWithFlanneld(t *testing.T) {
	testenv.SkipShort(t, "two namespace labs with a kube-apiserver each")
	testenv.NeedTools(t, "iptables-save", "bridge", "nft", "go")
	sides := []*kubeSide{
		{name: "flanneld", bin: flanneldBin(t)},
		{name: "weftd", bin: weftd(t), weft: true},
	}
	start := time.Now()
	for _, s := range sides {
		s.lab = labtest.New(t, lab.Spec{Prefix: "wk" + s.name[:1]})
		s.dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	errs := make([]error, len(sides))
	var wg sync.WaitGroup
	for i, s := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.setUp(ctx)
		}()
	}
	wg.Wait()
	for _, s := range sides {
		if s.srv != nil {
			testenv.OnInterrupt(t, "kube-apiserver", func() error { s.srv.Close(); return nil })
			t.Cleanup(s.srv.Close)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, s := range sides {
		s.id = kubetest.Flannel(t, s.cs, s.srv.URL, "..")
	}
	t.Logf("two labs with kube-apiservers in %v", time.Since(start).Round(time.Millisecond))

	seen := map[string]bool{}
	for i, c := range kubeCompatCases {
		t.Run(c.name, func(t *testing.T) {
			views := make([]compatView, len(sides))
			errs := make([]error, len(sides))
			var wg sync.WaitGroup
			for j, s := range sides {
				wg.Add(1)
				go func() {
					defer wg.Done()
					views[j], errs[j] = s.run(i, c)
				}()
			}
			wg.Wait()
			for j, err := range errs {
				if err != nil {
					t.Errorf("%s: %v", sides[j].name, err)
				}
			}
			if t.Failed() {
				return
			}
			for j, s := range sides {
				t.Logf("%s:\n%s", s.name, dump(views[j]))
			}
			for _, d := range diff(views[0], views[1]) {
				a := allowedIn(kubeCompatAllowed, c.name, d.item)
				if a == nil {
					t.Errorf("%s differs (not in kubeCompatAllowed):\n  flanneld: %s\n  weftd:    %s", d.item,
						indent(d.a), indent(d.b))
					continue
				}
				seen[a.id+" "+a.cases] = true
				t.Logf("%s differs as allowed (%s: %s)", d.item, a.id, a.reason)
			}
		})
	}
	t.Logf("all cases in %v", time.Since(start).Round(time.Millisecond))
	if t.Failed() {
		return
	}
	for _, a := range kubeCompatAllowed {
		if !seen[a.id+" "+a.cases] {
			t.Errorf("kubeCompatAllowed %s for %s matched no difference: remove it here (and, if it was the last, in docs/compatibility.md)", a.id, a.cases)
		}
	}
}

// setUp gives the side one host per case, in case order (so host i has the same
// address in both labs, and an IPv6 underlay address), and a kube-apiserver on the
// lab's etcd (s.srv; the caller stops it).
func (s *kubeSide) setUp(ctx context.Context) error {
	for i := range kubeCompatCases {
		h, err := s.lab.AddHost(ctx, lab.HostSpec{Name: fmt.Sprintf("k%d", i)})
		if err != nil {
			return err
		}
		if out, err := h.NS.Run(ctx, "ip", "-6", "addr", "add", hostIPv6(i)+"/64", "dev", "eth0", "nodad"); err != nil {
			return fmt.Errorf("%s: %w: %s", h.Name, err, out)
		}
	}
	srv, cs, err := startKubeAPI(ctx, s.lab.Router(), s.lab.Etcd().Endpoint())
	if err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	s.srv, s.cs = srv, cs
	return nil
}

// node makes a node object with podCIDRs and annotations (keys under ann), and a
// kubelet's annotation besides (flanneld v0.28 panics on a node without any).
func (s *kubeSide) node(ctx context.Context, name string, podCIDRs []string, annotations map[string]string) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"}}}
	for k, v := range annotations {
		n.Annotations[ann+k] = v
	}
	if len(podCIDRs) > 0 {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDRs[0], podCIDRs
	}
	_, err := s.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	return err
}

// run gives case i to the side's daemon on host k<i> and returns what it showed;
// the case's nodes and pod are removed afterwards, so the next case starts alone.
func (s *kubeSide) run(i int, c kubeCompatCase) (view compatView, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := s.lab.Host(fmt.Sprintf("k%d", i))
	self, pod := "node-"+h.Name, "kube-flannel-ds-"+h.Name
	defer func() {
		if cerr := s.removeCase(c, self, pod); cerr != nil && err == nil {
			err = cerr
		}
	}()
	conf := filepath.Join(s.dir, c.name+".json")
	if err := os.WriteFile(conf, []byte(c.netConf), 0o644); err != nil {
		return nil, err
	}
	for _, p := range c.peers {
		if err := s.node(ctx, p.name+"-"+h.Name, p.podCIDRs, p.ann); err != nil {
			return nil, err
		}
	}
	var cidrs []string
	if !c.later {
		cidrs = c.podCIDRs
	}
	if err := s.node(ctx, self, cidrs, c.selfAnn); err != nil {
		return nil, err
	}
	if err := s.pod(ctx, pod, self); err != nil {
		return nil, err
	}
	spec := lab.DaemonSpec{Binary: s.bin, Weft: s.weft, NoEtcd: true,
		Env: []string{"POD_NAME=" + pod, "POD_NAMESPACE=" + kubetest.Namespace},
		Args: []string{"--kube-subnet-mgr", "--kubeconfig-file=" + s.id.Kubeconfig, "--net-config-path=" + conf,
			"--healthz-ip=127.0.0.1", "--healthz-port=8475"}}
	d, err := s.lab.Start(ctx, h, spec)
	if err != nil {
		return nil, err
	}
	defer d.Stop()
	view = compatView{}
	if c.bad {
		var never *neverReady
		if s.weft {
			never = watchNeverReady(h.NS, d)
		}
		if err := s.refusal(ctx, d, self, view); err != nil {
			return nil, err
		}
		// Each refuses for the podCIDR, in its own words.
		why := "podCIDR outside the network config's Network"
		if !s.weft {
			why = "specified in the flannel net config doesn't contain"
		}
		view["refused for the podCIDR"] = fmt.Sprint(strings.Contains(d.Log(), why))
		if never != nil {
			if err := never.stop(); err != nil {
				return nil, err
			}
		}
		return view, nil
	}
	if c.later {
		// Before the podCIDR: flanneld stops at once, weftd waits, not ready.
		if err := awaitCond(ctx, 30*time.Second, func() bool {
			exited, _ := d.Exited()
			_, body := readyzOn(h.NS)
			return exited || strings.Contains(body, "podCIDR")
		}); err != nil {
			return nil, fmt.Errorf("neither exited nor waiting for the podCIDR: %w\n%s", err, d.LogTail(20))
		}
		host, err := hostView(ctx, h.NS, d.SubnetFile(), "", "")
		if err != nil {
			return nil, err
		}
		for k, v := range host {
			view["before podCIDR: "+k] = v
		}
		if err := s.nodeView(ctx, d, self, "before podCIDR: ", view); err != nil {
			return nil, err
		}
		n, err := s.cs.CoreV1().Nodes().Get(ctx, self, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		n.Spec.PodCIDR, n.Spec.PodCIDRs = c.podCIDRs[0], c.podCIDRs
		if _, err := s.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			return nil, err
		}
		if exited, _ := d.Exited(); exited {
			// As the kubelet would restart the DaemonSet's container.
			if d, err = s.lab.Start(ctx, h, spec); err != nil {
				return nil, err
			}
			defer d.Stop()
		}
	}
	routed := c.routed(nil)
	if err := s.settle(ctx, d, self, "", routed, nil, view); err != nil {
		return nil, err
	}
	if len(c.delLive) > 0 {
		if err := s.deletePeers(ctx, h.Name, c.delLive); err != nil {
			return nil, err
		}
		if err := s.settle(ctx, d, self, "after deleting a peer: ", c.routed(c.delLive), c.subnetsOf(c.delLive), view); err != nil {
			return nil, err
		}
	}
	if err := d.Stop(); err != nil {
		return nil, err
	}
	_, exitErr := d.Exited()
	view["exit on SIGTERM"] = daemonExit(exitErr)
	if !c.restart && len(c.delDown) == 0 {
		return view, nil
	}
	macBefore, err := vxlanMAC(ctx, h)
	if err != nil {
		return nil, err
	}
	if err := s.deletePeers(ctx, h.Name, c.delDown); err != nil {
		return nil, err
	}
	if err := os.Remove(d.SubnetFile()); err != nil {
		return nil, err
	}
	d2, err := s.lab.Start(ctx, h, spec)
	if err != nil {
		return nil, err
	}
	defer d2.Stop()
	gone := append(append([]string(nil), c.delLive...), c.delDown...)
	if err := s.settle(ctx, d2, self, "after restart: ", c.routed(gone), nil, view); err != nil {
		return nil, err
	}
	macAfter, err := vxlanMAC(ctx, h)
	if err != nil {
		return nil, err
	}
	view["restart keeps the vxlan MAC"] = fmt.Sprint(macBefore == macAfter)
	if err := d2.Stop(); err != nil {
		return nil, err
	}
	_, exitErr = d2.Exited()
	view["after restart: exit on SIGTERM"] = daemonExit(exitErr)
	return view, nil
}

// routed is the IPv4 subnets of the peers that must show up in our routes, but for
// those named in gone.
func (c kubeCompatCase) routed(gone []string) []string {
	var out []string
	for _, p := range c.peers {
		if p.routed && !contains(gone, p.name) {
			out = append(out, p.podCIDRs[0])
		}
	}
	return out
}

// subnetsOf is the IPv4 subnets of the named peers.
func (c kubeCompatCase) subnetsOf(names []string) []string {
	var out []string
	for _, p := range c.peers {
		if contains(names, p.name) {
			out = append(out, p.podCIDRs[0])
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// pod makes the object of the daemon's pod on node (kubetest.Pod, with errors).
func (s *kubeSide) pod(ctx context.Context, name, node string) error {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kubetest.Namespace, Labels: map[string]string{"app": "flannel"}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: kubetest.ServiceAccount, HostNetwork: true,
			Containers: []corev1.Container{{Name: "kube-flannel", Image: "weft.invalid/weftd:test"}}},
	}
	_, err := s.cs.CoreV1().Pods(kubetest.Namespace).Create(ctx, p, metav1.CreateOptions{})
	return err
}

func (s *kubeSide) deletePeers(ctx context.Context, host string, names []string) error {
	for _, n := range names {
		if err := s.cs.CoreV1().Nodes().Delete(ctx, n+"-"+host, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// removeCase deletes the case's nodes (those still there) and the daemon's pod.
func (s *kubeSide) removeCase(c kubeCompatCase, self, pod string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host := strings.TrimPrefix(self, "node-")
	names := []string{self}
	for _, p := range c.peers {
		names = append(names, p.name+"-"+host)
	}
	var errs []error
	for _, n := range names {
		if err := s.cs.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	grace := int64(0)
	if err := s.cs.CoreV1().Pods(kubetest.Namespace).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// refusal waits up to 15 s for the daemon to exit or write a subnet.env, and adds
// what it left: subnet.env or not, how it ended, our node's annotations.
func (s *kubeSide) refusal(ctx context.Context, d *lab.Daemon, self string, view compatView) error {
	_ = awaitCond(ctx, 15*time.Second, func() bool {
		exited, _ := d.Exited()
		_, err := os.Stat(d.SubnetFile())
		return exited || err == nil
	})
	_, err := os.Stat(d.SubnetFile())
	view["refused (no subnet.env)"] = fmt.Sprint(err != nil)
	host, err := hostView(ctx, d.Host.NS, d.SubnetFile(), "", "")
	if err != nil {
		return err
	}
	for k, v := range host {
		view[k] = v
	}
	if exited, exitErr := d.Exited(); exited {
		view["exit"] = daemonExit(exitErr)
	} else {
		view["exit"] = "still running after 15 s"
	}
	return s.nodeView(ctx, d, self, "", view)
}

// nodeView adds, under prefix, our node's annotations and NetworkUnavailable
// condition, subnet.env's presence, /readyz and whether the daemon still runs.
func (s *kubeSide) nodeView(ctx context.Context, d *lab.Daemon, self, prefix string, view compatView) error {
	n, err := s.cs.CoreV1().Nodes().Get(ctx, self, metav1.GetOptions{})
	if err != nil {
		return err
	}
	norm, err := ownNormaliser(ctx, d)
	if err != nil {
		return err
	}
	for k, v := range n.Annotations {
		if strings.HasPrefix(k, "weft.weftnet.io/") {
			continue // weft's own (its version, sites), which flanneld never writes nor reads
		}
		view[prefix+"node annotation "+k] = norm.text(v)
	}
	view[prefix+"node NetworkUnavailable"] = absent
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable {
			// The message names the daemon ("Flannel is running on this node").
			view[prefix+"node NetworkUnavailable"] = fmt.Sprintf("status=%s reason=%s", c.Status, c.Reason)
		}
	}
	if _, err := os.Stat(d.SubnetFile()); err != nil {
		view[prefix+"subnet.env"] = absent
	}
	code, _ := readyzOn(d.Host.NS)
	view[prefix+"readyz"] = code
	if exited, exitErr := d.Exited(); exited {
		view[prefix+"daemon"] = daemonExit(exitErr)
	} else {
		view[prefix+"daemon"] = "running"
	}
	return nil
}

// ownNormaliser replaces the host's subnets and vxlan MACs, as hostView does.
func ownNormaliser(ctx context.Context, d *lab.Daemon) (normaliser, error) {
	var n normaliser
	if env, err := os.ReadFile(d.SubnetFile()); err == nil && len(env) > 0 {
		e := d.Env()
		n.own, n.own6 = e.Subnet.Masked(), e.IPv6Subnet.Masked()
	}
	links, err := linkList(ctx, d.Host.NS)
	if err != nil {
		return n, err
	}
	for _, l := range links {
		switch {
		case strings.HasPrefix(l.Name, "flannel-v6.") && l.Kind == "vxlan":
			n.ownMAC6 = l.Address
		case strings.HasPrefix(l.Name, "flannel") && l.Kind == "vxlan":
			n.ownMAC = l.Address
		}
	}
	return n, nil
}

// settle waits until the daemon has written subnet.env, routes each of routed and
// none of gone, and three views in a row agree (at most 30 s); it adds that view,
// under prefix, to view.
func (s *kubeSide) settle(ctx context.Context, d *lab.Daemon, self, prefix string, routed, gone []string, view compatView) error {
	if _, err := d.WaitSubnetEnv(ctx, 30*time.Second); err != nil {
		return err
	}
	var last compatView
	same := 0
	deadline := time.Now().Add(30 * time.Second)
	for {
		snap, err := hostView(ctx, d.Host.NS, d.SubnetFile(), "", "")
		if err != nil {
			return err
		}
		if err := s.nodeView(ctx, d, self, "", snap); err != nil {
			return err
		}
		if exited, exitErr := d.Exited(); exited {
			return fmt.Errorf("daemon exited: %v\n%s", exitErr, d.LogTail(20))
		}
		ready := snap["readyz"] == "200" && !dadPending(snap)
		for _, r := range routed {
			ready = ready && strings.Contains(snap["routes"], r)
		}
		for _, r := range gone {
			ready = ready && !strings.Contains(snap["routes"], r)
		}
		if ready && last != nil && equalSnap(snap, last) {
			same++
		} else {
			same = 0
		}
		last = snap
		if same >= 2 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not settled after 30 s (ready %v; readyz %s; routes %s)\n%s", ready, snap["readyz"], snap["routes"], d.LogTail(20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
	for k, v := range last {
		if prefix == "" || view[k] != v {
			view[prefix+k] = v
		}
	}
	return nil
}

// readyzOn asks the daemon's /readyz in ns: the status code ("no answer" when
// nothing listens) and the body.
func readyzOn(ns *netns.NS) (string, string) {
	hc := &http.Client{Transport: &http.Transport{DialContext: ns.DialContext, DisableKeepAlives: true}, Timeout: 2 * time.Second}
	resp, err := hc.Get("http://127.0.0.1:8475/readyz")
	if err != nil {
		return "no answer", ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return fmt.Sprint(resp.StatusCode), strings.TrimSpace(string(body))
}

// neverReady watches a daemon that must never be ready: no 200 from /readyz and no
// subnet.env, from its start until stop.
type neverReady struct {
	done chan struct{}
	err  chan error
}

func watchNeverReady(ns *netns.NS, d *lab.Daemon) *neverReady {
	w := &neverReady{done: make(chan struct{}), err: make(chan error, 1)}
	go func() {
		var err error
		for checks := 0; ; checks++ {
			if code, body := readyzOn(ns); code == "200" {
				err = fmt.Errorf("ready (/readyz 200 %q) with a podCIDR outside Network", body)
			} else if _, serr := os.Stat(d.SubnetFile()); serr == nil {
				err = errors.New("wrote subnet.env with a podCIDR outside Network")
			}
			if err != nil {
				break
			}
			select {
			case <-w.done:
				w.err <- nil
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		w.err <- err
	}()
	return w
}

func (w *neverReady) stop() error {
	close(w.done)
	return <-w.err
}

// awaitCond polls cond every 100 ms until it holds or d passes.
func awaitCond(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("condition not met in %v", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
