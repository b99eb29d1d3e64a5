package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/encap/wireguard"
)

// How replaceUnderPings replaces a weftd.
const (
	byHandOver = "a hand-over"
	byRestart  = "a restart"
	byKill     = "a kill"
)

// sitesRelayedHandOver: a new weftd started on a1 beside the old one while a1's and
// b1's pods, relayed, ping each other every 10 ms. The old weftd hands its path
// socket on to the new one, and its device's relayed peers go on through it.
func sitesRelayedHandOver(t *testing.T, s *siteLab) { s.replaceUnderPings(t, "a1", byHandOver) }

// sitesRelayHandOver: the same with a new weftd on the host that relays them; it
// relays for a1 and b1 at once, without waiting for their next hello.
func sitesRelayHandOver(t *testing.T, s *siteLab) {
	s.replaceUnderPings(t, s.relayNow(t), byHandOver)
}

// sitesRelayRestart: the relay's weftd stopped with SIGTERM and started again at
// once; it relays for a1 and b1 at once too.
func sitesRelayRestart(t *testing.T, s *siteLab) { s.replaceUnderPings(t, s.relayNow(t), byRestart) }

// sitesRelayKilled: the relay's weftd killed with SIGKILL, as a crash, and started
// again at once. The relayed hosts' file is written while weftd runs (the test
// removes it and waits for it), so the new weftd relays for a1 and b1 at once here
// too.
func sitesRelayKilled(t *testing.T, s *siteLab) {
	relay := s.relayNow(t)
	file := filepath.Join(wgDir(s.at(t), s.h[relay]), wireguard.RelayedFile)
	if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	removed := time.Now()
	eventually(t, 20*time.Second, func() error {
		if _, err := os.Stat(file); err != nil {
			return fmt.Errorf("the weftd on %s has not written its relayed hosts again since %v: %w", relay, removed, err)
		}
		return nil
	})
	t.Logf("the weftd on %s wrote %s again %v after it was removed", relay, wireguard.RelayedFile, time.Since(removed).Round(time.Millisecond))
	s.replaceUnderPings(t, relay, byKill)
}

// relayNow is the host that relays a1's datagrams to b1 once a1 and b1 are relayed.
func (s *siteLab) relayNow(t *testing.T) string {
	s.awaitPath(t, "a1", "b1", isRelayed, 30*time.Second)
	relay, err := s.relayOf("a1", "b1")
	if err != nil {
		t.Fatal(err)
	}
	return relay
}

// replaceUnderPings replaces host name's weftd (how: a hand-over, SIGTERM or SIGKILL
// and a start) while the pods of a1 and b1, relayed, ping each other every 10 ms, and
// bounds the pings lost each way as TestHandOverLoss does.
func (s *siteLab) replaceUnderPings(t *testing.T, name string, how string) {
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
	switch how {
	case byHandOver:
		old := h.daemon
		s.start(c, name)
		awaitHandedOver(t, old)
	case byRestart:
		c.stop(h)
		s.start(c, name)
	case byKill:
		if err := h.daemon.Kill(); err != nil { // waits until it is gone
			t.Fatal(err)
		}
		s.start(c, name)
	}
	handOver := how == byHandOver
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
