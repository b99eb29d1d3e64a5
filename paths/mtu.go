package paths

// searchSizes is how many sizes one round of an MTU search sends (each twice: one
// lost packet must not lower the MTU found), and searchDone the precision it stops at.
const (
	searchSizes = 12
	searchDone  = 1
)

// mtuSearch finds the largest packet that passes a path: lo passes, hi does not.
// Each round sends sizes spread between them and narrows to the largest answered
// and the next size up; a 1,450-byte range is down to the byte in three rounds.
type mtuSearch struct {
	lo, hi int
	sizes  []int
	rounds int
}

func newSearch(lo, hi int) *mtuSearch {
	s := &mtuSearch{lo: lo, hi: hi}
	s.spread()
	return s
}

// spread picks the sizes of the next round, evenly between lo and hi (both out).
func (s *mtuSearch) spread() {
	s.sizes = s.sizes[:0]
	step := max((s.hi-s.lo)/(searchSizes+1), 1)
	for v := s.lo + step; v < s.hi && len(s.sizes) < searchSizes; v += step {
		s.sizes = append(s.sizes, v)
	}
}

// took narrows by the sizes answered in a round; done when the answer is precise
// enough (or the search ran long: a path whose answers make no sense), with found
// the largest size known to pass.
func (s *mtuSearch) took(answered []int) (found int, done bool) {
	s.rounds++
	passed := map[int]bool{}
	for _, v := range answered {
		passed[v] = true
	}
	lo, hi := s.lo, s.hi
	for _, v := range s.sizes {
		if passed[v] && v > lo {
			lo = v
		}
	}
	for _, v := range s.sizes {
		if !passed[v] && v > lo && v < hi {
			hi = v
		}
	}
	s.lo, s.hi = lo, hi
	if s.hi-s.lo <= searchDone || s.rounds >= 5 {
		return s.lo, true
	}
	s.spread()
	return 0, false
}
