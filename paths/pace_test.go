package paths

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/weftnet/weft/encap"
	"go.uber.org/zap"
)

// paceLister lists no paths and records the paces it is told.
type paceLister struct {
	mu    sync.Mutex
	paces []time.Duration
}

func (l *paceLister) Paths() []encap.Path { return nil }
func (l *paceLister) ProbePace(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.paces = append(l.paces, d)
}

// TestProbePace: a backend that follows the pace is told, once, when a new path's
// first round comes at the latest: the refresh interval and a tick; the refresh
// interval grows with the peers the rate must cover, to 10 s.
func TestProbePace(t *testing.T) {
	l := &paceLister{}
	pr := New(Config{Interval: 2 * time.Second}, l, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pr.Run(ctx) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		n := len(l.paces)
		l.mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(3 * tick) // more ticks: told once, not on each
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := 2*time.Second + tick; len(l.paces) != 1 || l.paces[0] != want {
		t.Fatalf("paces told %v, want once %v", l.paces, want)
	}

	for _, c := range []struct {
		peers int
		want  time.Duration
	}{{10, 2 * time.Second}, {1000, 2 * time.Second}, {2000, 5 * time.Second}, {5000, 10 * time.Second}} {
		pr := New(Config{Interval: 2 * time.Second, Rate: 130}, l, zap.NewNop())
		for i := range c.peers {
			pr.peers[netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)] = &peer{}
		}
		pr.perRound = 1.2
		if got := pr.refreshEvery(); got < c.want-time.Second || got > c.want+time.Second {
			t.Errorf("%d peers: refreshed every %v, want about %v", c.peers, got, c.want)
		}
	}
}
