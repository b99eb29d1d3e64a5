package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftnet/weft/internal/netns"
	"github.com/weftnet/weft/internal/netnstest"
	"github.com/weftnet/weft/internal/testenv"
)

// cniPath is where the flannel CNI plugin (make deps builds it into bin/cni) and
// Debian's bridge and host-local plugins live.
func cniPath(t *testing.T) string {
	t.Helper()
	flannel := filepath.Join(binDir(), "cni")
	_, err := os.Stat(filepath.Join(flannel, "flannel"))
	testenv.Need(t, err == nil, "the flannel CNI plugin in "+flannel+" (make deps builds it)")
	_, err = os.Stat("/usr/lib/cni/bridge")
	testenv.Need(t, err == nil, "/usr/lib/cni/bridge and host-local (Debian's containernetworking-plugins)")
	return flannel + ":/usr/lib/cni"
}

// cniPod attaches a new pod namespace on h with the real flannel CNI plugin reading
// weftd's subnet.env, and returns the pod and its address. DEL runs at cleanup.
func (c *cluster) cniPod(h *host) (*netns.NS, string) {
	c.t.Helper()
	path := cniPath(c.t)
	pod := netnstest.New(c.t, "wc")
	name := "weft-" + pod.Name
	conf := fmt.Sprintf(`{"cniVersion":"0.3.1","name":%q,"type":"flannel","subnetFile":%q,"dataDir":%q,
		"delegate":{"isDefaultGateway":true}}`, name, h.subnetFile(), filepath.Join(h.dir, "cni"))
	run := func(command string) ([]byte, error) {
		cmd := exec.Command("ip", "netns", "exec", h.ns.Name, filepath.Join(strings.Split(path, ":")[0], "flannel"))
		cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+pod.Name,
			"CNI_NETNS=/var/run/netns/"+pod.Name, "CNI_IFNAME=eth0", "CNI_PATH="+path)
		cmd.Stdin = strings.NewReader(conf)
		return cmd.CombinedOutput()
	}
	out, err := run("ADD")
	c.t.Cleanup(func() {
		if out, err := run("DEL"); err != nil {
			c.t.Errorf("CNI DEL: %v: %s", err, out)
		}
		os.RemoveAll(filepath.Join("/var/lib/cni/networks", name))
	})
	if err != nil {
		c.t.Fatalf("CNI ADD on %s: %v: %s", h.name, err, out)
	}
	var result struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(out, &result); err != nil || len(result.IPs) == 0 {
		c.t.Fatalf("CNI ADD result %s: %v", out, err)
	}
	ip, _, _ := strings.Cut(result.IPs[0].Address, "/")
	return pod, ip
}

// TestFlannelCNIPods: pods attached by the real flannel CNI plugin from weftd's
// subnet.env reach each other across hosts, on every backend (host-gw on one LAN, the
// others across the router).
func TestFlannelCNIPods(t *testing.T) {
	for _, tc := range []struct{ backend, lanB string }{{"udp", "lan2"}, {"vxlan", "lan2"}, {"host-gw", "lan1"}} {
		t.Run(tc.backend, func(t *testing.T) {
			c := newCluster(t, "v3")
			c.putConfig(fmt.Sprintf(`{"Network":"198.18.0.0/16","Backend":{"Type":%q}}`, tc.backend))
			a, b := c.addHost("a", "lan1"), c.addHost("b", tc.lanB)
			c.start(a)
			c.start(b)
			c.waitSubnetEnv(a)
			c.waitSubnetEnv(b)
			podA, ipA := c.cniPod(a)
			podB, ipB := c.cniPod(b)
			c.ping(podA, ipB)
			c.ping(podB, ipA)
			out, err := podA.Run(context.Background(), "ip", "-4", "route")
			if err != nil || !strings.Contains(out, "default via") {
				t.Fatalf("pod routes: %v: %s", err, out)
			}
		})
	}
}
