package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestEtcdOutage: with etcd down, weftd keeps forwarding between the hosts it knows,
// idles quietly (little CPU, one log line: flanneld has hot-looped here), and once
// etcd is back says so and its watches resume: a host that joins afterwards is
// reachable. On both APIs: v3 reports from the gRPC connection state, v2 from probes.
func TestEtcdOutage(t *testing.T) {
	for _, api := range []string{"v3", "v2"} {
		t.Run(api, func(t *testing.T) { testEtcdOutage(t, api) })
	}
}

func testEtcdOutage(t *testing.T, api string) {
	c, hosts, pods := podClusterAPI(t, api, "udp", map[string]string{"a": "lan1", "c": "lan2"})
	meshPing(c, hosts, pods, "a", "c")
	a := hosts["a"]
	cpuBefore, err := a.daemon.CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	logBefore := countLines(a.logs())

	c.etcd.Stop()
	// The outage lasts as long as these pings: 30 each way, 200 ms apart. They must
	// come back (one lost to chance is tolerated; a stalled data path loses them all).
	for _, p := range [][2]string{{"a", "c"}, {"c", "a"}} {
		out, _ := hosts[p[0]].pod.Run(context.Background(), "ping", "-n", "-q", "-c", "30", "-i", "0.2", "-W", "1", pods[p[1]])
		if got := pingReceived(out); got < 29 {
			t.Fatalf("pod %s -> pod %s while etcd is down: %d of 30 replies\n%s", p[0], p[1], got, out)
		}
	}
	cpuAfter, err := a.daemon.CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	// About 12 s of outage (and 60 pings forwarded): a retry loop with backoff needs
	// a few milliseconds of that; a hot loop would need seconds.
	used, lines := cpuAfter-cpuBefore, countLines(a.logs())-logBefore
	t.Logf("while etcd was down, weftd on a used %v of CPU and logged %d lines", used, lines)
	if used > time.Second {
		t.Errorf("weftd on a used %v of CPU while etcd was down", used)
	}
	if lines > 30 {
		t.Errorf("weftd on a logged %d lines while etcd was down:\n%s", lines, a.logs())
	}
	// Not ready while etcd is away (the watch is not current), forwarding all the same.
	readyz(t, a, 503, "no connection to etcd")
	// Quiet, but not silent: one line says etcd is gone.
	if n := strings.Count(a.logs(), "etcd unreachable"); n != 1 {
		t.Errorf("weftd on a reported etcd unreachable %d times, want once:\n%s", n, a.logs())
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.etcd.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	d := c.addHost("d", "lan1")
	c.start(d)
	hosts["d"], pods["d"] = d, c.attachPod(d, c.waitSubnetEnv(d))
	meshPing(c, hosts, pods, "a", "c", "d")
	readyz(t, a, 200, "ok")
	eventually(t, 30*time.Second, func() error {
		if !strings.Contains(a.logs(), "etcd reachable again") {
			return fmt.Errorf("weftd on a did not report etcd back:\n%s", a.logs())
		}
		return nil
	})
}

// pingReceived reads "N received" from ping's summary (-1 when there is none).
func pingReceived(out string) int {
	for _, f := range strings.Split(out, ", ") {
		if n, ok := strings.CutSuffix(f, " received"); ok {
			if v, err := strconv.Atoi(n); err == nil {
				return v
			}
		}
	}
	return -1
}
