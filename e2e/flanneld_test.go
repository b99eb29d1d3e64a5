package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/kubetest"
	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/testenv"
)

// flanneldBin returns the upstream flanneld that make flanneld builds from
// test/flannel into the bin directory.
func flanneldBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir(), "flanneld")
	_, err := os.Stat(bin)
	testenv.Need(t, err == nil, "upstream flanneld at "+bin+" (make flanneld builds it)")
	return bin
}

// startFlanneld runs the upstream flanneld on h against the cluster's etcd (v3 API,
// the only one flanneld still speaks).
// It starts flanneld alone and returns once flanneld has its lease: flanneld's v3
// registry does not retry when another daemon creates, in the same instant, the
// subnet it picked at random (it exits: "failed to acquire lease: subnet already
// exists"), so the daemons started before it get their leases first, and those
// started after it find flanneld's.
func (c *cluster) startFlanneld(h *host, env []string, extra ...string) {
	c.t.Helper()
	for _, o := range c.hosts {
		if o == h || o.daemon == nil {
			continue
		}
		if exited, _ := o.daemon.Exited(); !exited {
			c.waitSubnetEnv(o)
		}
	}
	c.run(h, lab.DaemonSpec{Binary: flanneldBin(c.t), Env: env, Args: extra})
	c.waitSubnetEnv(h)
}

// TestMixedWithFlanneld: weftd hosts and an upstream flanneld host share one etcd.
// They get distinct subnets in flannel's layout with a 24 h TTL, read each other's
// leases, and carry pod traffic both ways on each backend.
func TestMixedWithFlanneld(t *testing.T) {
	for _, tc := range []struct {
		name, backend string
		options       string // more members of the Backend object
		lanF          string // flanneld's LAN: host-gw needs one segment
	}{
		{"udp", "udp", "", "lan2"},
		// weft's own option: flanneld must start on the shared config all the same.
		{"udp busy poll", "udp", `,"BusyPoll":"20ms"`, "lan2"},
		{"vxlan", "vxlan", "", "lan2"},
		{"host-gw", "host-gw", "", "lan1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, "v3")
			c.putConfig(fmt.Sprintf(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":%q%s}}`, tc.backend, tc.options))
			hosts := map[string]*host{"a": c.addHost("a", "lan1"), "b": c.addHost("b", "lan1"), "f": c.addHost("f", tc.lanF)}
			c.start(hosts["a"])
			c.start(hosts["b"])
			c.startFlanneld(hosts["f"], nil)
			pods := map[string]string{}
			subnets := map[netip.Prefix]*host{}
			for name, h := range hosts {
				env := c.waitSubnetEnv(h)
				if other, dup := subnets[env.Subnet]; dup {
					t.Fatalf("%s and %s both got %v", h.name, other.name, env.Subnet)
				}
				subnets[env.Subnet] = h
				pods[name] = c.attachPod(h, env)
			}
			// flanneld leaves BackendType out of its udp leases; weftd writes it.
			c.checkLeases(subnets, func(h *host) string {
				if h.name == "f" && tc.backend == "udp" {
					return ""
				}
				return tc.backend
			})
			if tc.options != "" && !strings.Contains(hosts["a"].logs(), `"busy_poll":0.02`) {
				t.Errorf("weftd a did not take BusyPoll from the config:\n%s", hosts["a"].logs())
			}
			meshPing(c, hosts, pods, "a", "b", "f")
			bps := iperfTCP(t, hosts["a"].pod, hosts["f"].pod, pods["f"], 1)
			if bps <= 0 {
				t.Fatalf("iperf3 weftd a -> flanneld f: %v bit/s", bps)
			}
			t.Logf("%s: pod on weftd a -> pod on flanneld f: %.2f Gbit/s", tc.backend, bps/1e9)
			// Bursts of small datagrams both ways between weftd and flanneld.
			udpBurst(t, hosts["a"].pod, hosts["f"].pod, pods["f"], 100)
			udpBurst(t, hosts["f"].pod, hosts["a"].pod, pods["a"], 100)
		})
	}
}

// TestMixedWithFlanneldKube: in Kubernetes mode a weftd node and a flanneld node, both
// as kube-flannel's ServiceAccount and finding their nodes from their pods, read each
// other's node annotations and carry pod traffic both ways.
func TestMixedWithFlanneldKube(t *testing.T) {
	for _, tc := range []struct {
		backend, prefix string // prefix: --kube-annotation-prefix, "" for the default
		keys            string // what annotation keys start with
	}{
		{"udp", "", "flannel.alpha.coreos.com/"},
		// flanneld's rule for a prefix with a slash: both daemons must agree on the keys.
		{"vxlan", "example.com/flannel", "example.com/flannel-"},
	} {
		backend := tc.backend
		t.Run(backend, func(t *testing.T) {
			c := newCluster(t, "v3")
			_, cs, id := kubeCluster(t, c)
			conf := netConf(t, backend)
			cidrs := map[string]string{"a": "198.18.10.0/24", "f": "198.18.30.0/24"}
			hosts := map[string]*host{}
			for name, lan := range map[string]string{"a": "lan1", "f": "lan2"} {
				createNode(t, cs, "node-"+name, cidrs[name])
				hosts[name] = c.addHost(name, lan)
			}
			var extra []string
			if tc.prefix != "" {
				extra = []string{"--kube-annotation-prefix=" + tc.prefix}
			}
			c.startKube(hosts["a"], cs, id, conf, extra...)
			kubetest.Pod(t, cs, "kube-flannel-ds-f", "node-f")
			c.run(hosts["f"], lab.DaemonSpec{Binary: flanneldBin(t), NoEtcd: true,
				Env:  []string{"POD_NAME=kube-flannel-ds-f", "POD_NAMESPACE=" + kubetest.Namespace},
				Args: append([]string{"--kube-subnet-mgr", "--kubeconfig-file=" + id.Kubeconfig, "--net-config-path=" + conf}, extra...)})
			pods := c.podsOnPodCIDRs(hosts, cidrs)
			meshPing(c, hosts, pods, "a", "f")
			// Both published the same annotations, which is how each learned the other.
			for _, name := range []string{"node-a", "node-f"} {
				n := getNode(t, cs, name)
				for _, k := range []string{"backend-data", "backend-type", "kube-subnet-manager", "public-ip"} {
					if _, ok := n.Annotations[tc.keys+k]; !ok {
						t.Errorf("%s lacks annotation %s: %v", name, k, n.Annotations)
					}
				}
			}
		})
	}
}
