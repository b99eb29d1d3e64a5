package kube

import (
	"errors"
	"testing"
	"time"
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
