package paths

import "testing"

// TestSearchFinds: a search answered as a path of MTU truth would answer finds truth
// within a few rounds, whatever the truth.
func TestSearchFinds(t *testing.T) {
	for _, tc := range []struct{ lo, hi, truth int }{
		{64, 1450, 1350}, {64, 1450, 1449}, {64, 1450, 65}, {64, 1472, 1372}, {64, 1420, 1000}, {64, 9001, 1500},
	} {
		s := newSearch(tc.lo, tc.hi)
		found, done, rounds := 0, false, 0
		for !done {
			rounds++
			var answered []int
			for _, v := range s.sizes {
				if v <= tc.truth {
					answered = append(answered, v, v) // each size is sent twice
				}
			}
			found, done = s.took(answered)
		}
		if found != tc.truth {
			t.Errorf("%d..%d, truth %d: found %d after %d rounds", tc.lo, tc.hi, tc.truth, found, rounds)
		}
		if rounds > 5 {
			t.Errorf("%d..%d, truth %d: %d rounds", tc.lo, tc.hi, tc.truth, rounds)
		}
	}
}

// TestSearchNoAnswers: a path that answers no size ends the search at the small
// probe's size, never above it.
func TestSearchNoAnswers(t *testing.T) {
	s := newSearch(smallProbe, 1450)
	found, done := 0, false
	for i := 0; i < 10 && !done; i++ {
		found, done = s.took(nil)
	}
	if !done || found != smallProbe {
		t.Fatalf("found %d done %v, want %d", found, done, smallProbe)
	}
}
