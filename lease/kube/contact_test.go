package kube

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestContactCheck(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	boom := errors.New("connection refused")
	for _, tt := range []struct {
		name     string
		heard    []time.Duration // offsets from t0
		failedAt time.Duration   // -1: never
		now      time.Duration
		want     error
	}{
		{"nothing yet", nil, -1, 0, errNoContact},
		{"heard recently", []time.Duration{0}, -1, time.Minute, nil},
		{"failed after last heard", []time.Duration{0}, time.Second, 2 * time.Second, errWatchFailing},
		{"recovered after failing", []time.Duration{0, 2 * time.Second}, time.Second, 3 * time.Second, nil},
		{"failed before ever heard", nil, 0, time.Second, errWatchFailing},
		{"quiet too long", []time.Duration{0}, -1, 16 * time.Minute, errWatchStale},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var at time.Time
			c := &contact{now: func() time.Time { return at }}
			events := map[time.Duration]func(){}
			for _, h := range tt.heard {
				events[h] = c.heard
			}
			for d := time.Duration(0); d <= tt.now; d += time.Second {
				at = t0.Add(d)
				if f, ok := events[d]; ok {
					f()
				}
				if tt.failedAt >= 0 && d == tt.failedAt {
					c.failed(boom)
				}
			}
			err := c.check(t0.Add(tt.now), 15*time.Minute)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("check = %v, want %v", err, tt.want)
			}
			if errors.Is(err, errWatchFailing) && !errors.Is(err, boom) {
				t.Fatalf("%v does not carry the cause", err)
			}
		})
	}
}

// TestTrackedWatchStopWaits: Stop of the node watch returns only once the goroutine
// passing its events on has returned (the informer stops its watch before its Run
// returns, and Close waits for that), here while that goroutine is slow with an event.
func TestTrackedWatchStopWaits(t *testing.T) {
	cs := fake.NewClientset()
	inEvent := make(chan struct{}, 1)
	var calls atomic.Int32
	c := &contact{now: func() time.Time {
		if calls.Add(1) > 1 { // the first is the watch opening, then the event
			inEvent <- struct{}{}
			time.Sleep(200 * time.Millisecond)
		}
		return time.Now()
	}}
	ctx := context.Background()
	w, err := trackedNodes{nodes: cs.CoreV1().Nodes(), c: c, st: &listStats{}, log: zap.NewNop()}.WatchWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-inEvent
	w.Stop()
	if left := goroutinesIn("kube.(*trackedWatch).run("); len(left) > 0 {
		t.Fatalf("Stop returned with the watch's goroutine still running:\n%s", left[0])
	}
}

// goroutinesIn returns the stacks of the goroutines that have fn in theirs.
func goroutinesIn(fn string) []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte(fn)) {
			out = append(out, string(g))
		}
	}
	return out
}
