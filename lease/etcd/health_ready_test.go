package etcd

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestManagerHealth: not ready once etcd has been unreachable longer than a
// reconnect takes, ready again when MonitorReachability sees it back.
func TestManagerHealth(t *testing.T) {
	m := NewManager(nil, ManagerOptions{}, zap.NewNop())
	now := time.Now()
	if err := m.Health(now); err != nil {
		t.Fatalf("reachable: %v", err)
	}
	m.downSince.Store(now.UnixNano())
	if err := m.Health(now.Add(time.Second)); err != nil {
		t.Fatalf("down for a second (a reconnect): %v", err)
	}
	if err := m.Health(now.Add(unreachableAfter + time.Second)); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("down for longer: %v, want ErrUnreachable", err)
	}
	m.downSince.Store(0)
	if err := m.Health(now.Add(time.Minute)); err != nil {
		t.Fatalf("back: %v", err)
	}
}
