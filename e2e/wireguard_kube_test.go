package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/kubetest"
	"github.com/weftnet/weft/bench/lab"
)

// TestWireGuardKube: weftd --kube-subnet-mgr on two nodes (one behind the router) as
// kube-flannel's ServiceAccount, with the wireguard backend: each node's annotations
// are flanneld's (backend-type wireguard, backend-data {"PublicKey","Port"} as
// flanneld marshals it), each weftd has the other as its peer from those
// annotations, and pods on the podCIDRs ping both ways.
func TestWireGuardKube(t *testing.T) {
	c := wgCluster(t)
	_, cs, id := kubeCluster(t, c)
	conf := filepath.Join(t.TempDir(), "net-conf.json")
	if err := os.WriteFile(conf, []byte(`{"Network":"198.18.0.0/16","Backend":{"Type":"wireguard"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cidrs := map[string]string{"a": "198.18.10.0/24", "b": "198.18.20.0/24"}
	hosts := map[string]*host{}
	for name, lan := range map[string]string{"a": "lan1", "b": "lan2"} {
		createNode(t, cs, "node-"+name, cidrs[name])
		h := c.addHost(name, lan)
		hosts[name] = h
		pod := "kube-flannel-ds-" + name
		kubetest.Pod(t, cs, pod, "node-"+name)
		c.run(h, lab.DaemonSpec{Binary: c.bin, Weft: true, NoEtcd: true,
			Env: append(wgEnv(c, h), "POD_NAME="+pod, "POD_NAMESPACE="+kubetest.Namespace),
			Args: []string{"--healthz-ip=127.0.0.1", "--healthz-port=8475",
				"--kube-subnet-mgr", "--kubeconfig-file=" + id.Kubeconfig, "--net-config-path=" + conf}})
	}
	pods := c.podsOnPodCIDRs(hosts, cidrs)
	meshPing(c, hosts, pods, "a", "b")

	keys := map[string]string{}
	for name, h := range hosts {
		keys[name] = strings.TrimSpace(c.sh(h.ns, "wg pubkey < "+filepath.Join(wgDir(c, h), "wgkey")))
		ann := getNode(t, cs, "node-"+name).Annotations
		want := map[string]string{
			"flannel.alpha.coreos.com/backend-type":        "wireguard",
			"flannel.alpha.coreos.com/backend-data":        fmt.Sprintf(`{"PublicKey":%q,"Port":51820}`, keys[name]),
			"flannel.alpha.coreos.com/public-ip":           h.ip,
			"flannel.alpha.coreos.com/kube-subnet-manager": "true",
		}
		for k, v := range want {
			if ann[k] != v {
				t.Errorf("node-%s annotation %s = %q, want %q", name, k, ann[k], v)
			}
		}
	}
	for name, peer := range map[string]string{"a": "b", "b": "a"} {
		p := waitHandshake(c, hosts[name], keys[peer], 0)
		if p.endpoint != hosts[peer].ip+":51820" || p.allowed != cidrs[peer] {
			t.Fatalf("peer %s on %s: %+v, want endpoint %s:51820 allowed-ips %s", peer, name, p, hosts[peer].ip, cidrs[peer])
		}
	}
}
