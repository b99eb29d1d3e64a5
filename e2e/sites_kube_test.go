package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/weftnet/weft/bench/kubeproc"
	"github.com/weftnet/weft/bench/kubetest"
	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/testenv"
)

// siteKubeHost is where the sites lab's kube-apiserver listens: the internet
// segment's router address, which the site hosts reach through their NATs.
const siteKubeHost = "203.0.113.1"

// siteCIDRs are the podCIDRs of the sites lab's nodes, as the node IPAM controller
// would give them.
var siteCIDRs = map[string]string{"p": "198.18.1.0/24", "q": "198.18.2.0/24",
	"a1": "198.18.11.0/24", "a2": "198.18.12.0/24", "b1": "198.18.21.0/24"}

// Weft's node annotations for a host in a site (lease/kube).
const (
	annSite   = "weft.weftnet.io/site"
	annSiteIP = "weft.weftnet.io/site-ip"
	annNAT    = "weft.weftnet.io/nat"
)

// TestSitesKube: the sites lab (see siteHosts) with both sites routed (no NAT), in
// Kubernetes mode: a real
// kube-apiserver on the internet segment, weftd --kube-subnet-mgr with the wireguard
// backend on every host as kube-flannel's ServiceAccount, and no --site: the site
// hosts' nodes carry the label topology.kubernetes.io/region, which weftd reads.
func TestSitesKube(t *testing.T) {
	s, cs := newKubeSiteLab(t)
	s.explain(t)
	for _, st := range []struct {
		name string
		f    func(*testing.T, *siteLab, kubernetes.Interface)
	}{
		{"annotations", sitesKubeAnnotations},
		{"every pair", func(t *testing.T, s *siteLab, _ kubernetes.Interface) { sitesMesh(t, s) }},
		{"paths", sitesKubePaths},
	} {
		if !t.Run(st.name, func(t *testing.T) { st.f(t, s, cs) }) {
			return
		}
	}
}

// newKubeSiteLab builds the sites lab with kube-apiserver in its router (on the lab's
// etcd), a Node per host (podCIDR; label region = its site on the site hosts), and
// runs weftd in Kubernetes mode with the wireguard backend (userspace device) on every
// host, and a pod on each attached by the flannel CNI plugin.
func newKubeSiteLab(t *testing.T) (*siteLab, kubernetes.Interface) {
	t.Helper()
	testenv.NeedTools(t, "wg", "unshare", "nft", "conntrack", "ping", "etcd", "go")
	l := labtest.New(t, lab.Spec{Prefix: "wk", NoEtcd: true})
	// Two regions routed to each other, no NAT anywhere: one cloud network across
	// two regions, the layout most cloud nodes (labelled with their region) are on.
	sites, err := l.BuildNAT(context.Background(), lab.NATSpec{Public: []string{"p", "q"},
		Sites: []lab.SiteSpec{{Name: "a", Hosts: []string{"a1", "a2"}, Mode: lab.Routed}, {Name: "b", Hosts: []string{"b1"}, Mode: lab.Routed}}})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, lab: l, router: l.Router(), etcd: l.Etcd(), api: "v3", bin: weftd(t)}
	s := &siteLab{cluster: c, sites: sites, h: map[string]*host{}, pod: map[string]string{},
		subnet: map[string]string{}, names: siteHosts} // no --site: the label says
	for _, name := range siteHosts {
		lh := l.Host(name)
		h := &host{name: name, ns: lh.NS, ip: lh.Addr.String(), lh: lh}
		c.hosts = append(c.hosts, h)
		s.h[name] = h
	}
	srv, cs := siteKubeAPI(t, c)
	id := kubetest.Flannel(t, cs, srv.URL, "..")
	conf := filepath.Join(t.TempDir(), "net-conf.json")
	if err := os.WriteFile(conf, []byte(sitesConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	// The daemons stop before the API server does (cleanups run last first).
	t.Cleanup(func() {
		for _, h := range c.hosts {
			if h.daemon != nil {
				if err := h.daemon.Stop(); err != nil {
					t.Errorf("stop weftd on %s: %v", h.name, err)
				}
			}
		}
	})
	for _, name := range siteHosts {
		h := s.h[name]
		siteNode(t, cs, name)
		pod := "kube-flannel-ds-" + name
		kubetest.Pod(t, cs, pod, "node-"+name)
		c.run(h, lab.DaemonSpec{Binary: c.bin, Weft: true, NoEtcd: true,
			Env: append(wgEnv(c, h), "POD_NAME="+pod, "POD_NAMESPACE="+kubetest.Namespace),
			Args: []string{"--healthz-ip=127.0.0.1", "--healthz-port=8475",
				"--kube-subnet-mgr", "--kubeconfig-file=" + id.Kubeconfig, "--net-config-path=" + conf}})
	}
	for _, name := range siteHosts {
		h := s.h[name]
		s.subnet[name] = c.waitSubnetEnv(h).Subnet.String()
		if s.subnet[name] != siteCIDRs[name] {
			t.Fatalf("%s: subnet %s, want its node's podCIDR %s", name, s.subnet[name], siteCIDRs[name])
		}
		h.pod, s.pod[name] = c.cniPod(h)
	}
	t.Logf("subnets %v, pods %v", s.subnet, s.pod)
	return s, cs
}

// siteKubeAPI runs kube-apiserver in the lab's router on siteKubeHost:6443, on the
// lab's etcd, and returns it and an admin client for the test's setup. It stops at
// the test's cleanup.
func siteKubeAPI(t *testing.T, c *cluster) (*kubeproc.Server, kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	bin, err := kubeproc.Binary(ctx, "..")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := kubeproc.Start(ctx, kubeproc.Options{Binary: bin, Etcd: c.etcd.Endpoint(),
		Netns: c.router.Name, Host: siteKubeHost, Dial: c.router.DialContext})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cfg, err := clientcmd.BuildConfigFromFlags("", srv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dial = c.router.DialContext
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv, cs
}

// siteNode creates node-<name> with its podCIDR and, for a host in a site, the
// label topology.kubernetes.io/region naming the site.
func siteNode(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + name,
		Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
		Spec: corev1.NodeSpec{PodCIDR: siteCIDRs[name], PodCIDRs: []string{siteCIDRs[name]}}}
	if site := map[string]string{"a1": "a", "a2": "a", "b1": "b"}[name]; site != "" {
		n.Labels = map[string]string{"topology.kubernetes.io/region": site}
	}
	if _, err := cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// sitesKubeAnnotations: the site hosts' nodes get weft's site annotations (their
// label's site, their interface address, not behind NAT: a region label never means
// NAT, and no NAT address, there being none); the public hosts' get none.
// Every node's public-ip is its interface address, as flanneld writes it.
func sitesKubeAnnotations(t *testing.T, s *siteLab, cs kubernetes.Interface) {
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, name := range siteHosts {
			h := s.h[name]
			n, err := cs.CoreV1().Nodes().Get(context.Background(), "node-"+name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("node-%s: %w", name, err)
			}
			ann := n.Annotations
			if v, ok := ann["weft.weftnet.io/outside"]; ok {
				return fmt.Errorf("node-%s publishes a NAT address %q on a lab without NAT", name, v)
			}
			want := map[string]string{annSite: h.lh.LAN, annSiteIP: h.ip, annNAT: "false",
				"flannel.alpha.coreos.com/public-ip": h.ip}
			for k, w := range want {
				got, ok := ann[k]
				switch {
				case h.lh.LAN == lab.Internet && k != "flannel.alpha.coreos.com/public-ip":
					if ok {
						return fmt.Errorf("node-%s (no site) has %s=%q: %v", name, k, got, ann)
					}
				case got != w:
					return fmt.Errorf("node-%s: %s=%q, want %q: %v", name, k, got, w, ann)
				}
			}
		}
		return nil
	})
}

// sitesKubePaths: a1 dials a2 directly at its site address, and b1 (another region,
// routed) directly at its address, both ways: what flanneld does on this layout.
func sitesKubePaths(t *testing.T, s *siteLab, _ kubernetes.Interface) {
	testenv.Eventually(t, 20*time.Second, func() error {
		for _, pair := range [][2]string{{"a1", "a2"}, {"a1", "b1"}, {"b1", "a1"}} {
			p, err := s.peerOn(pair[0], pair[1])
			if err != nil {
				return err
			}
			if want := s.h[pair[1]].ip + ":51820"; p.Path != "direct" || p.Endpoint != want || p.State != "up" {
				return fmt.Errorf("%s on %s: path %q endpoint %q state %q, want direct to %s, up", pair[1], pair[0], p.Path, p.Endpoint, p.State, want)
			}
		}
		return nil
	})
}
