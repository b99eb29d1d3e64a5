package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// sitesRelayedHandOver: a new weftd started on a1 beside the old one while a1's and
// b1's pods, relayed, ping each other every 10 ms. The old weftd hands its path
// socket on to the new one, and its device's relayed peers go on through it.
func sitesRelayedHandOver(t *testing.T, s *siteLab) { s.replaceUnderPings(t, "a1", true) }

// sitesRelayHandOver: the same with a new weftd on the host that relays them; it
// relays for a1 and b1 at once, without waiting for their next hello.
func sitesRelayHandOver(t *testing.T, s *siteLab) { s.replaceUnderPings(t, s.relayNow(t), true) }

// sitesRelayRestart: the relay's weftd stopped with SIGTERM and started again at
// once; it relays for a1 and b1 at once too.
func sitesRelayRestart(t *testing.T, s *siteLab) { s.replaceUnderPings(t, s.relayNow(t), false) }

// relayNow is the host that relays a1's datagrams to b1 once a1 and b1 are relayed.
func (s *siteLab) relayNow(t *testing.T) string {
	s.awaitPath(t, "a1", "b1", isRelayed, 30*time.Second)
	relay, err := s.relayOf("a1", "b1")
	if err != nil {
		t.Fatal(err)
	}
	return relay
}

// replaceUnderPings replaces host name's weftd (a hand-over, or SIGTERM and a start)
// while the pods of a1 and b1, relayed, ping each other every 10 ms, and bounds the
// pings lost each way as TestHandOverLoss does.
func (s *siteLab) replaceUnderPings(t *testing.T, name string, handOver bool) {
	c := s.at(t)
	s.awaitPath(t, "a1", "b1", isRelayed, 30*time.Second)
	a1, h := s.h["a1"], s.h[name]
	toA, toB := startPingLog(t, s.h["b1"].pod, s.pod["a1"], restartPingEvery), startPingLog(t, a1.pod, s.pod["b1"], restartPingEvery)
	steady := time.Now()
	eventually(t, 10*time.Second, func() error {
		if !toA.repliedSince(steady) || !toB.repliedSince(steady) {
			return fmt.Errorf("no ping replies both ways yet")
		}
		return nil
	})
	how := "a hand-over"
	if handOver {
		old := h.daemon
		s.start(c, name)
		awaitHandedOver(t, old)
	} else {
		how = "a restart"
		c.stop(h)
		s.start(c, name)
	}
	replaced := time.Now()
	eventually(t, 30*time.Second, func() error {
		at := time.Now().Add(-500 * time.Millisecond)
		if !at.After(replaced) || !toA.repliedSince(at) || !toB.repliedSince(at) {
			return fmt.Errorf("no replies both ways in the last 500 ms since %s yet", how)
		}
		return nil
	})
	toA.finish(t)
	toB.finish(t)
	lostA, lostB, maxLost := toA.lost(), toB.lost(), int(restartGapMax/restartPingEvery)
	t.Logf("relayed a1 <-> b1 across %s on %s: to a1 %d of %d lost (longest gap %v); from a1 %d of %d lost (longest gap %v); bound %d each way",
		how, name, lostA, toA.sent, toA.maxGap().Round(time.Millisecond), lostB, toB.sent, toB.maxGap().Round(time.Millisecond), maxLost)
	logs := h.logs()
	if os.Getenv("WEFT_DEBUG_RESTART") != "" {
		t.Log(logs)
	}
	if lostA > maxLost || lostB > maxLost {
		t.Errorf("relayed a1 <-> b1 lost %d pings to a1 and %d from a1 across %s on %s; at most %d each way", lostA, lostB, how, name, maxLost)
	}
	if handOver && !strings.Contains(logs, "the new device joined") {
		t.Errorf("the old weftd's WireGuard device on %s did not serve beside the new one", name)
	}
	if handOver && !strings.Contains(logs, "going on with the path socket the weftd before us passed on") {
		t.Errorf("the new weftd on %s opened a path socket of its own instead of going on with the old one's", name)
	}
	if name != "a1" && !strings.Contains(logs, "relaying at once for the hosts relayed before the restart") {
		t.Errorf("the new weftd on %s does not say it relays at once for the hosts its predecessor relayed", name)
	}
}
