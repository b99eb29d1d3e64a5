package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
)

// The sites lab (lab.BuildNAT): p and q on the internet segment (203.0.113.10, .11,
// no site), a1 and a2 in site a (192.0.2.10, .11) behind router ra (203.0.113.2), b1
// in site b (198.51.100.10) behind rb (203.0.113.3). Both routers masquerade and
// forward nothing inwards; etcd sits on the internet segment (203.0.113.1).
var siteHosts = []string{"p", "q", "a1", "a2", "b1"}

// No PersistentKeepaliveInterval: hosts behind NAT must keep their mappings open
// by themselves (weftd's 25 s).
const sitesConfig = `{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":"wireguard"}}`

type siteLab struct {
	*cluster
	names   []string // the hosts, public first
	sites   map[string]*lab.Site
	h       map[string]*host
	pod     map[string]string // pod address by host
	subnet  map[string]string // lease subnet by host
	useSite bool
	started time.Time // when the last daemon was started
}

// natSpec is the sites lab of siteHosts: both sites behind masquerading routers.
var natSpec = lab.NATSpec{Public: []string{"p", "q"},
	Sites: []lab.SiteSpec{{Name: "a", Hosts: []string{"a1", "a2"}}, {Name: "b", Hosts: []string{"b1"}}}}

// newSiteLab builds the sites lab of spec (natSpec: siteHosts) and runs weftd
// (wireguard, userspace device) on every host, with --site on the site hosts when
// useSite, and a pod on every host attached by the flannel CNI plugin.
func newSiteLab(t *testing.T, useSite bool, spec lab.NATSpec) *siteLab {
	t.Helper()
	testenv.NeedTools(t, "wg", "unshare", "nft", "conntrack", "ping", "etcd")
	l := labtest.New(t, lab.Spec{Prefix: "ws", NoEtcd: true})
	sites, err := l.BuildNAT(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, lab: l, router: l.Router(), etcd: l.Etcd(), api: "v3", bin: weftd(t)}
	s := &siteLab{cluster: c, sites: sites, h: map[string]*host{}, pod: map[string]string{},
		subnet: map[string]string{}, useSite: useSite, names: slices.Clone(spec.Public)}
	for _, ss := range spec.Sites {
		s.names = append(s.names, ss.Hosts...)
	}
	for _, name := range s.names {
		lh := l.Host(name)
		h := &host{name: name, ns: lh.NS, ip: lh.Addr.String(), lh: lh}
		c.hosts = append(c.hosts, h)
		s.h[name] = h
	}
	c.putConfig(sitesConfig)
	for _, name := range s.names {
		s.start(c, name)
	}
	s.started = time.Now()
	for _, name := range s.names {
		h := s.h[name]
		s.subnet[name] = c.waitSubnetEnv(h).Subnet.String()
		h.pod, s.pod[name] = c.cniPod(h)
	}
	t.Logf("subnets %v, pods %v", s.subnet, s.pod)
	return s
}

// at is the lab's cluster helpers for t (a subtest): they fail t, not the parent.
func (s *siteLab) at(t *testing.T) *cluster {
	c := *s.cluster
	c.t = t
	return &c
}

// start runs weftd on host name: its own key and UAPI sockets, the health port for
// GET /peers and /metrics, and --site for a site host when the lab uses sites.
func (s *siteLab) start(c *cluster, name string) {
	c.t.Helper()
	h := s.h[name]
	args := []string{"--etcd-api=v3", "--healthz-ip=127.0.0.1", "--healthz-port=8475"}
	if site := h.lh.LAN; s.useSite && site != lab.Internet {
		args = append(args, "--site="+site)
	}
	c.run(h, lab.DaemonSpec{Binary: c.bin, Weft: true, Args: args, Env: wgEnv(c, h)})
}

// hostOf is the host whose lease has subnet, or "".
func (s *siteLab) hostOf(subnet string) string {
	for name, sn := range s.subnet {
		if sn == subnet {
			return name
		}
	}
	return ""
}

// sitePeer is one entry of GET /peers, the keys the sites tests read.
type sitePeer struct {
	Subnet        string `json:"subnet"`
	PublicIP      string `json:"publicIP"`
	State         string `json:"state"`
	Reason        string `json:"reason"`
	Path          string `json:"path"`
	PathDetail    string `json:"pathDetail"`
	Endpoint      string `json:"endpoint"`
	LastHandshake string `json:"lastHandshake"`
}

// peersJSON GETs /peers from weftd on h.
func peersJSON(h *host) ([]byte, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: h.ns.DialContext}, Timeout: 5 * time.Second}
	resp, err := hc.Get("http://127.0.0.1:8475/peers")
	if err != nil {
		return nil, fmt.Errorf("GET /peers on %s: %w", h.name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s: %s", resp.Status, body)
	}
	if err != nil {
		return nil, fmt.Errorf("GET /peers on %s: %w", h.name, err)
	}
	return body, nil
}

// peerOn is the entry of GET /peers on host from for host to.
func (s *siteLab) peerOn(from, to string) (sitePeer, error) {
	body, err := peersJSON(s.h[from])
	if err != nil {
		return sitePeer{}, err
	}
	var r struct{ Peers []sitePeer }
	if err := json.Unmarshal(body, &r); err != nil {
		return sitePeer{}, fmt.Errorf("GET /peers on %s: %w: %s", from, err, body)
	}
	for _, p := range r.Peers {
		if p.Subnet == s.subnet[to] {
			return p, nil
		}
	}
	return sitePeer{}, fmt.Errorf("GET /peers on %s has no entry for %s (%s): %s", from, to, s.subnet[to], body)
}

// explain logs, when t failed, what every running weftd says of its peers: GET
// /peers and `wg show flannel-wg` through the host's own UAPI sockets.
func (s *siteLab) explain(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, name := range s.names {
			h := s.h[name]
			if exited, _ := h.daemon.Exited(); exited {
				t.Logf("%s: weftd not running", name)
				continue
			}
			body, err := peersJSON(h)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			wg, _ := wgTool(ctx, s.cluster, h, "wg", "show", "flannel-wg").CombinedOutput()
			cancel()
			t.Logf("%s (%s, subnet %s): GET /peers: %s %v\nwg show flannel-wg:\n%s", name, h.ip, s.subnet[name], body, err, wg)
		}
	})
}

// awaitPing pings dst from ns once a second until it answers or within passes, and
// returns how long that took.
func awaitPing(ns *netns.NS, dst string, within time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		out, err := ns.Run(context.Background(), "ping", "-c", "1", "-W", "1", dst)
		if err == nil {
			return time.Since(start), nil
		}
		if time.Since(start) > within {
			return time.Since(start), fmt.Errorf("ping %s from %s: no answer within %v: %s", dst, ns.Name, within, strings.TrimSpace(out))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pingPairs pings, all at once, from the pod of each host of names to the pod of
// every other one, and returns the pairs ("a1->p") that answered and those that did
// not within within.
func (s *siteLab) pingPairs(names []string, within time.Duration) (ok, failed []string) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, from := range names {
		for _, to := range names {
			if from == to {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := awaitPing(s.h[from].pod, s.pod[to], within)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = append(failed, from+"->"+to)
				} else {
					ok = append(ok, from+"->"+to)
				}
			}()
		}
	}
	wg.Wait()
	slices.Sort(ok)
	slices.Sort(failed)
	return ok, failed
}

// TestSitesWithoutSite documents today's limit of the same topology without --site:
// every host reaches the public hosts and its own site's hosts, but the hosts of
// site a never reach b1 (each dials the other's private address, which no route
// leads to). Every pair is given 15 s.
func TestSitesWithoutSite(t *testing.T) {
	s := newSiteLab(t, false, natSpec)
	s.explain(t)
	ok, failed := s.pingPairs(siteHosts, 15*time.Second)
	t.Logf("without --site: answered %v; not answered %v", ok, failed)
	var want []string
	for _, from := range siteHosts {
		for _, to := range siteHosts {
			crosses := (from == "b1" && strings.HasPrefix(to, "a")) || (to == "b1" && strings.HasPrefix(from, "a"))
			if from != to && crosses {
				want = append(want, from+"->"+to)
			}
		}
	}
	slices.Sort(want)
	if !slices.Equal(failed, want) {
		t.Fatalf("without --site, unanswered pairs %v, want exactly %v", failed, want)
	}
}
