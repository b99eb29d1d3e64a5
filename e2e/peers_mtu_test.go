package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
)

// The MTU hole of TestPeersPathMTU: the router's links carry 1400 bytes, so VXLAN
// (50 bytes of outer headers) carries 1350 across it.
const (
	holeMTU      = 1400
	holeVXLANMTU = holeMTU - 50
)

// Below stallBytes an iperf3 run stalled (a few small segments may pass); above
// movedBytes it moved data.
const (
	stallBytes = 64 << 10
	movedBytes = 1 << 20
)

// iperfRun runs one iperf3 TCP transfer of seconds from pod from to dst, the address
// of pod to, bounded on every side: the connect times out after 3 s and the run is
// killed seconds+8 s after it began. It returns the bytes the receiver got (0 when
// the run did not complete) and what iperf3 said. It runs once: a stalled run must
// not be retried into a passing one.
func iperfRun(t *testing.T, from, to *netns.NS, dst string, seconds int) (float64, string) {
	t.Helper()
	testenv.NeedTools(t, "iperf3", "ss")
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+8)*time.Second)
	defer cancel()
	const port = "5297"
	srv := to.Command(ctx, "iperf3", "-s", "-1", "-p", port)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	eventually(t, 5*time.Second, func() error {
		if out, _ := to.Run(ctx, "ss", "-Htln", "sport", "= :"+port); !strings.Contains(out, ":"+port) {
			return fmt.Errorf("iperf3 server on %s does not listen yet", to.Name)
		}
		return nil
	})
	out, err := from.Command(ctx, "iperf3", "-c", dst, "-p", port, "-t", strconv.Itoa(seconds),
		"--connect-timeout", "3000", "-J").Output()
	var r struct {
		End struct {
			SumReceived struct {
				Bytes float64 `json:"bytes"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if jerr := json.Unmarshal(out, &r); jerr != nil || err != nil {
		return 0, fmt.Sprintf("iperf3: %v (%v) %s %s", err, ctx.Err(), exitText(err), out)
	}
	return r.End.SumReceived.Bytes, fmt.Sprintf("received %.0f bytes %s", r.End.SumReceived.Bytes, r.Error)
}

// pingDF sends one ping of size bytes (IP packet) with DF from ns to dst and reports
// whether it was answered.
func pingDF(ns *netns.NS, dst string, size int) bool {
	out, _ := ns.Run(context.Background(), "ping", "-c1", "-W1", "-M", "do", "-s", strconv.Itoa(size-28), dst)
	return strings.Contains(out, " 1 received")
}

// setPathMTU makes the router's path between the LANs carry mtu bytes (lab.SetPathMTU).
func setPathMTU(c *cluster, mtu int) {
	c.t.Helper()
	testenv.NeedTools(c.t, "nft")
	if err := c.lab.SetPathMTU(context.Background(), mtu); err != nil {
		c.t.Fatal(err)
	}
}

// routeMTURe finds the mtu of a route as `ip route` shows it.
var routeMTURe = regexp.MustCompile(`\bmtu (?:lock )?(\d+)`)

// routeMTU is the mtu of h's route to dst (0 when it has none) and the route.
func routeMTU(c *cluster, h *host, dst string) (int, string) {
	r := routeTo(c, h, dst)
	m := routeMTURe.FindStringSubmatch(r)
	if m == nil {
		return 0, r
	}
	n, _ := strconv.Atoi(m[1])
	return n, r
}

// TestPeersPathMTU: hosts a (lan1) and b (lan2) talk through a router whose links
// carry 1400 bytes and which drops IP fragments and ICMP "fragmentation needed", as
// many cloud paths do; the hosts' own links carry 1500, so weftd gives VXLAN its
// usual 1450. Without weftd's probes (WEFT_PROBE=false) small pings between pods pass
// and TCP stalls. With them, a reports b degraded for path-mtu with the MTU the hole
// leaves, lowers its route to b's subnet to it, and TCP between the pods flows;
// without the hole b is up again and the route's mtu is gone.
func TestPeersPathMTU(t *testing.T) {
	c := newCluster(t, "v3")
	c.putConfig(backendConfig("vxlan"))
	a, b := c.addHost("a", lab.LAN1), c.addHost("b", lab.LAN2)
	noProbe := "WEFT_PROBE=false"
	startPeerHost(c, a, "vxlan", noProbe)
	startPeerHost(c, b, "vxlan", noProbe)
	envA, envB := c.waitSubnetEnv(a), c.waitSubnetEnv(b)
	if envA.MTU != 1450 {
		t.Fatalf("FLANNEL_MTU %d on a, want 1450 (the hosts' links are 1500)", envA.MTU)
	}
	podA, podB := c.attachPod(a, envA), c.attachPod(b, envB)
	c.ping(a.pod, podB)
	c.ping(b.pod, podA)
	setPathMTU(c, holeMTU)
	subnetB := envB.Subnet.String()

	ok := t.Run("probes off", func(t *testing.T) {
		c.ping(a.pod, podB) // 84 bytes pass the hole
		if pingDF(a.pod, podB, envA.MTU) {
			t.Fatalf("a full-size ping (%d bytes) crossed the hole", envA.MTU)
		}
		n, out := iperfRun(t, a.pod, b.pod, podB, 2)
		if n >= stallBytes {
			t.Fatalf("TCP across the hole without the repair did not stall: %s", out)
		}
		t.Logf("without the repair TCP stalls: %s", out)
		mtu, r := routeMTU(c, a, subnetB)
		if mtu != 0 || r == "" {
			t.Fatalf("route to b's subnet without probes: %q", r)
		}
		// The repair the probes should make, by hand: TCP flows with it.
		c.sh(a.ns, fmt.Sprintf("ip route change %s mtu %d", r, holeVXLANMTU))
		n, out = iperfRun(t, a.pod, b.pod, podB, 2)
		c.sh(a.ns, "ip route change "+r)
		if n < movedBytes {
			t.Fatalf("TCP across the hole with a's route mtu %d set by hand: %s", holeVXLANMTU, out)
		}
		t.Logf("with a's route mtu %d set by hand TCP flows: %s", holeVXLANMTU, out)
	})
	if !ok {
		return
	}
	t.Run("probes on", func(t *testing.T) {
		c := c.sub(t)
		c.hosts = []*host{a, b}
		for _, h := range []*host{a, b} {
			c.stop(h)
			startPeerHost(c, h, "vxlan")
			c.waitSubnetEnv(h)
		}
		p := awaitPeer(t, a, b, 20*time.Second, func(p peerView) error {
			switch {
			case p.State != "degraded" || p.Reason != "path-mtu":
				return fmt.Errorf("state %q reason %q, want degraded path-mtu", p.State, p.Reason)
			case p.PathMTU < holeVXLANMTU-10 || p.PathMTU > holeVXLANMTU:
				return fmt.Errorf("pathMTU %d, want %d (at most 10 less)", p.PathMTU, holeVXLANMTU)
			case p.RouteMTU != p.PathMTU:
				return fmt.Errorf("routeMTU %d, want the pathMTU %d", p.RouteMTU, p.PathMTU)
			}
			return nil
		})
		eventually(t, 5*time.Second, func() error {
			if mtu, r := routeMTU(c, a, subnetB); mtu != p.PathMTU {
				return fmt.Errorf("a's route to b's subnet %q, want mtu %d", r, p.PathMTU)
			}
			return nil
		})
		n, out := iperfRun(t, a.pod, b.pod, podB, 2)
		if n < movedBytes {
			t.Fatalf("TCP across the hole with the route MTU %d: %s", p.PathMTU, out)
		}
		t.Logf("with the route MTU %d TCP flows: %s", p.PathMTU, out)

		setPathMTU(c, lab.UnderlayMTU)
		awaitPeer(t, a, b, peerUpWithin, isUp(envA.MTU))
		eventually(t, 5*time.Second, func() error {
			if mtu, r := routeMTU(c, a, subnetB); mtu != 0 {
				return fmt.Errorf("a's route to b's subnet after the hole: %q", r)
			}
			return nil
		})
	})
}
