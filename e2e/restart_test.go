package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/lab"
)

const (
	// restartPingEvery is the pods' ping interval across a restart (100/s each way).
	restartPingEvery = 10 * time.Millisecond
	// restartGapMax bounds the gap a restart may leave on udp and userspace WireGuard:
	// no process holds the device from the old weftd's exit until the new one has
	// its lease and the other hosts' (about 0.1-0.3 s on a quiet machine; see
	// docs/performance.md for the measured losses). 3 s is the margin of a loaded
	// 2-core machine; WireGuard adds one handshake retry, for an initiation lost
	// while the device was not read.
	restartGapMax = 3 * time.Second
)

// TestRestartLoss: weftd stopped with SIGTERM while the pods on two hosts ping each
// other every 10 ms, and the same binary started again at once (as `systemctl
// restart` does). vxlan and host-gw lose no ping: the kernel forwards throughout.
// udp and userspace WireGuard keep their device (the same ifindex: the new weftd
// takes it over, it does not make it again) and lose only while no process holds
// it. The losses each way are logged.
func TestRestartLoss(t *testing.T) {
	for _, backend := range []string{"udp", "vxlan", "host-gw", "wireguard"} {
		t.Run(backend, func(t *testing.T) { testReplaceLoss(t, backend, false) })
	}
}

// TestHandOverLoss: a second weftd started on host a while the first runs (as a
// DaemonSet rolling with maxSurge does), with the pods on two hosts pinging each
// other every 10 ms. The new one reads its config beside the old one, asks it to
// stop, and takes the device over; the old one exits 0. The losses each way are
// logged, bounded as a restart's.
func TestHandOverLoss(t *testing.T) {
	for _, backend := range []string{"udp", "vxlan", "host-gw", "wireguard"} {
		t.Run(backend, func(t *testing.T) { testReplaceLoss(t, backend, true) })
	}
}

// testReplaceLoss replaces a's weftd while the pods ping: SIGTERM then a new start,
// or (handOver) a new start beside the old one.
func testReplaceLoss(t *testing.T, backend string, handOver bool) {
	var c *cluster
	start := func(h *host) { c.start(h) }
	dev, maxLost := map[string]string{"udp": "flannel0", "wireguard": "flannel-wg"}[backend], 0
	switch backend {
	case "wireguard":
		c = wgCluster(t)
		start = func(h *host) { startWG(c, h) }
		maxLost = int((restartGapMax + wgHandshakeRetry) / restartPingEvery)
		if handOver {
			// The old device serves its sessions until the peers have moved to the new
			// one's: no handshake retry in the gap.
			maxLost = int(restartGapMax / restartPingEvery)
		}
	default:
		c = newCluster(t, "v3")
		c.putConfig(fmt.Sprintf(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":%q}}`, backend))
		if backend == "udp" {
			maxLost = int(restartGapMax / restartPingEvery)
		}
	}
	a, b := c.addHost("a", "lan1"), c.addHost("b", "lan1")
	start(a)
	start(b)
	podA, podB := c.attachPod(a, c.waitSubnetEnv(a)), c.attachPod(b, c.waitSubnetEnv(b))
	c.ping(a.pod, podB)
	c.ping(b.pod, podA)
	eventually(t, 10*time.Second, func() error { return healthy(a) })
	index := func() string {
		if dev == "" {
			return ""
		}
		return strings.Fields(c.sh(a.ns, "ip -o link show dev "+dev))[0]
	}
	before := index()

	toA, toB := startPingLog(t, b.pod, podA, restartPingEvery), startPingLog(t, a.pod, podB, restartPingEvery)
	steady := time.Now()
	eventually(t, 10*time.Second, func() error {
		if !toA.repliedSince(steady) || !toB.repliedSince(steady) {
			return fmt.Errorf("no ping replies both ways yet")
		}
		return nil
	})

	stopped := time.Now()
	how := "SIGTERM and start at once"
	if handOver {
		how = "hand-over"
		old := a.daemon
		start(a)
		awaitHandedOver(t, old)
		stopped = time.Now()
	} else {
		c.stop(a) // SIGTERM, and wait until it is gone
		start(a)
	}
	eventually(t, 20*time.Second, func() error { return healthy(a) })
	ready := time.Since(stopped)
	// Replies both ways after the restart, and a stretch of them: the ping's tail
	// shows traffic back for good.
	eventually(t, 20*time.Second, func() error {
		at := time.Now().Add(-500 * time.Millisecond)
		if !at.After(stopped) || !toA.repliedSince(at) || !toB.repliedSince(at) {
			return fmt.Errorf("no replies both ways in the last 500 ms since the restart yet")
		}
		return nil
	})
	toA.finish(t)
	toB.finish(t)
	// Lost: no reply, and a later ping answered (the last request may still be in
	// flight when the ping stops: ping counts it transmitted, not received).
	lostA, lostB := toA.lost(), toB.lost()
	t.Logf("%s: %s: healthz ready %v after the old weftd ended; to a: %d of %d lost (longest gap %v, %d in flight at the end); from a: %d of %d lost (longest gap %v, %d in flight at the end); bound %d each way",
		backend, how, ready.Round(time.Millisecond), lostA, toA.sent, toA.maxGap().Round(time.Millisecond), toA.sent-toA.got-lostA,
		lostB, toB.sent, toB.maxGap().Round(time.Millisecond), toB.sent-toB.got-lostB, maxLost)
	if os.Getenv("WEFT_DEBUG_RESTART") != "" {
		t.Log(a.logs())
	}
	if lostA > maxLost || lostB > maxLost {
		t.Errorf("%s lost %d pings to a and %d from a across the %s; at most %d each way", backend, lostA, lostB, how, maxLost)
	}
	if logs := a.logs(); handOver && (!strings.Contains(logs, "asks to take over") || !strings.Contains(logs, "taking over")) {
		t.Errorf("the weftds' log does not show the hand-over")
	}
	if logs := a.logs(); handOver && backend == "wireguard" && !strings.Contains(logs, "the new device joined") {
		t.Errorf("the old weftd's WireGuard device did not serve beside the new one (no %q in the log)", "the new device joined")
	}
	if after := index(); after != before {
		t.Errorf("%s made again across the restart (ifindex %s, was %s): the new weftd should take it over", dev, after, before)
	}
	if logs := a.logs(); dev != "" && !strings.Contains(logs, `"found": true`) && !strings.Contains(logs, `"found":true`) &&
		!strings.Contains(logs, "taking over the WireGuard device") {
		t.Errorf("weftd's log does not say it took %s over", dev)
	}
}

// awaitHandedOver waits until old, the weftd a new one took over from, has exited 0.
func awaitHandedOver(t *testing.T, old *lab.Daemon) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		if code, done := old.ExitCode(); !done {
			return fmt.Errorf("the old weftd still runs")
		} else if code != 0 {
			return fmt.Errorf("the old weftd exited with status %d; want 0", code)
		}
		return nil
	})
}

// TestRestartOtherBackend: a weftd started with another backend type removes the
// device the last one left (udp's flannel0 stays on stop, for the next weftd of its
// type), and its route with it; the new backend carries the traffic.
func TestRestartOtherBackend(t *testing.T) {
	c := newCluster(t, "v3")
	c.putConfig(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":"udp"}}`)
	a := c.addHost("a", "lan1")
	c.start(a)
	c.waitSubnetEnv(a)
	c.stop(a)
	if out := c.sh(a.ns, "ip -o link show"); !strings.Contains(out, "flannel0") {
		t.Fatalf("flannel0 gone when udp's weftd stopped:\n%s", out)
	}
	c.putConfig(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":"vxlan"}}`)
	c.start(a)
	c.waitSubnetEnv(a)
	eventually(t, 10*time.Second, func() error { return healthy(a) })
	if out := c.sh(a.ns, "ip -o link show"); strings.Contains(out, "flannel0") || !strings.Contains(out, "flannel.1") {
		t.Fatalf("after the switch to vxlan: want flannel.1 and no flannel0:\n%s", out)
	}
	if routes := c.sh(a.ns, "ip route show 198.18.0.0/16"); strings.Contains(routes, "flannel0") {
		t.Fatalf("udp's route left: %s", routes)
	}
	b := c.addHost("b", "lan1")
	c.start(b)
	podA, podB := c.attachPod(a, c.waitSubnetEnv(a)), c.attachPod(b, c.waitSubnetEnv(b))
	c.ping(a.pod, podB)
	c.ping(b.pod, podA)
}
