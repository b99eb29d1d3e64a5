package daemon

import (
	"testing"
	"time"
)

func TestConditionDue(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	zeroOfZero := conditionPatch{at: t0, ok: true, msg: "0 of 0 peers reachable", peers: 0}
	twoOK := conditionPatch{at: t0, ok: true, msg: "2 of 2 peers reachable", peers: 2}
	for _, tc := range []struct {
		name string
		last conditionPatch
		next conditionPatch
		want bool
	}{
		{"first", conditionPatch{}, conditionPatch{at: t0, ok: true, msg: "0 of 0 peers reachable"}, true},
		{"first failed, retried", conditionPatch{at: t0}, conditionPatch{at: at(time.Second), ok: true, msg: "1 of 1 peers reachable", peers: 1}, true},
		{"same", twoOK, conditionPatch{at: at(time.Hour), ok: true, msg: twoOK.msg, peers: 2}, false},
		{"flip too soon", twoOK, conditionPatch{at: at(9 * time.Second), ok: false, msg: "1 of 2 peers down: x", peers: 2}, false},
		{"flip", twoOK, conditionPatch{at: at(10 * time.Second), ok: false, msg: "1 of 2 peers down: x", peers: 2}, true},
		{"message within the minute", twoOK, conditionPatch{at: at(59 * time.Second), ok: true, msg: "3 of 3 peers reachable", peers: 3}, false},
		{"message after the minute", twoOK, conditionPatch{at: at(time.Minute), ok: true, msg: "3 of 3 peers reachable", peers: 3}, true},
		// The first list of the leases came after the first tick: the peers found are
		// told as soon as a flip would be, not a minute later.
		{"peers after none, too soon", zeroOfZero, conditionPatch{at: at(5 * time.Second), ok: true, msg: twoOK.msg, peers: 2}, false},
		{"peers after none", zeroOfZero, conditionPatch{at: at(10 * time.Second), ok: true, msg: twoOK.msg, peers: 2}, true},
		{"peers gone", twoOK, conditionPatch{at: at(10 * time.Second), ok: true, msg: zeroOfZero.msg, peers: 0}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := conditionDue(tc.last, tc.next); got != tc.want {
				t.Fatalf("conditionDue(%+v, %+v) = %v, want %v", tc.last, tc.next, got, tc.want)
			}
		})
	}
}
