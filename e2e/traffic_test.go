package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/proxy"
)

// podCluster starts weftd with backend on hosts a, b (lan1) and c (lan2), attaches a
// pod to each and returns the pods' addresses by host.
func podCluster(t *testing.T, backend string, names map[string]string) (*cluster, map[string]*host, map[string]string) {
	return podClusterAPI(t, "v3", backend, names)
}

// podClusterAPI is podCluster on etcd's v3 or v2 API.
func podClusterAPI(t *testing.T, api, backend string, names map[string]string) (*cluster, map[string]*host, map[string]string) {
	c := newCluster(t, api)
	c.putConfig(fmt.Sprintf(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":%q}}`, backend))
	hosts, pods := map[string]*host{}, map[string]string{}
	for name, lan := range names {
		hosts[name] = c.addHost(name, lan)
		c.start(hosts[name])
	}
	for name, h := range hosts {
		pods[name] = c.attachPod(h, c.waitSubnetEnv(h))
	}
	return c, hosts, pods
}

// meshPing pings every pod from every other pod.
func meshPing(c *cluster, hosts map[string]*host, pods map[string]string, among ...string) {
	c.t.Helper()
	for _, from := range among {
		for _, to := range among {
			if from != to {
				c.ping(hosts[from].pod, pods[to])
			}
		}
	}
}

// iperfTCP runs an iperf3 TCP transfer from one pod to another and returns bit/s.
func iperfTCP(t *testing.T, from, to *netns.NS, dst string, seconds int) float64 {
	t.Helper()
	testenv.NeedTools(t, "iperf3")
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+20)*time.Second)
	defer cancel()
	srv := to.Command(ctx, "iperf3", "-s", "-1", "-p", "5299")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	var bps float64
	eventually(t, 10*time.Second, func() error {
		out, err := from.Command(ctx, "iperf3", "-c", dst, "-p", "5299", "-t", fmt.Sprint(seconds), "-J").Output()
		if err != nil {
			return fmt.Errorf("iperf3: %v: %s", err, exitText(err))
		}
		var r struct {
			End struct {
				SumReceived struct {
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"sum_received"`
			} `json:"end"`
		}
		if err := json.Unmarshal(out, &r); err != nil {
			return err
		}
		bps = r.End.SumReceived.BitsPerSecond
		if bps <= 0 {
			return fmt.Errorf("iperf3 moved nothing: %s", out)
		}
		return nil
	})
	return bps
}

func exitText(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// udpStats reads the udp backend's counters from weftd's /stats on h.
func udpStats(h *host) (proxy.Stats, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: h.ns.DialContext}, Timeout: 2 * time.Second}
	resp, err := hc.Get("http://127.0.0.1:8475/stats")
	if err != nil {
		return proxy.Stats{}, err
	}
	defer resp.Body.Close()
	var s proxy.Stats
	return s, json.NewDecoder(resp.Body).Decode(&s)
}
