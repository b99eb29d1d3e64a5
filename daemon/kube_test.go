package daemon

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/weftnet/weft/lease"
)

// syncingManager is a lease.Manager whose cache syncs after delay (never: < 0).
type syncingManager struct {
	lease.Manager
	delay time.Duration
}

func (m syncingManager) WaitSynced(ctx context.Context) error {
	if m.delay < 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	select {
	case <-time.After(m.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestWaitSynced: without CONT_WHEN_CACHE_NOT_READY a cache that does not sync in time
// stops weftd, as flanneld exits; with it weftd logs an error and goes on.
func TestWaitSynced(t *testing.T) {
	tests := []struct {
		name      string
		mgr       lease.Manager
		cont      bool
		wantErr   error
		wantError bool // an error line logged
	}{
		{name: "synced", mgr: syncingManager{delay: 0}},
		{name: "synced in time", mgr: syncingManager{delay: 5 * time.Millisecond}},
		{name: "not synced", mgr: syncingManager{delay: -1}, wantErr: errCacheNotSynced},
		{name: "not synced, continue", mgr: syncingManager{delay: -1}, cont: true, wantError: true},
		{name: "no cache", mgr: plainManager{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			d := &daemon{cfg: &Config{ContWhenCacheNotReady: tt.cont}, log: zap.New(core)}
			err := d.waitSynced(context.Background(), tt.mgr, 50*time.Millisecond)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("waitSynced = %v, want %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v does not wrap context.DeadlineExceeded", err)
			}
			if got := logs.FilterLevelExact(zapcore.ErrorLevel).Len() > 0; got != tt.wantError {
				t.Errorf("error logged: %v, want %v (%v)", got, tt.wantError, logs.All())
			}
		})
	}
}

// TestWaitSyncedStopped: a stop while waiting is no failure.
func TestWaitSyncedStopped(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d := &daemon{cfg: &Config{}, log: zap.NewNop()}
	if err := d.waitSynced(ctx, syncingManager{delay: -1}, time.Hour); err != nil {
		t.Fatalf("waitSynced after a stop = %v, want nil", err)
	}
}
