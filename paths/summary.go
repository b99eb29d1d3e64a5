package paths

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Counts is how many peers are in each state.
func (pr *Prober) Counts() map[string]int {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	c := map[string]int{StateUnknown: 0, StateUp: 0, StateDegraded: 0, StateDown: 0}
	for _, p := range pr.peers {
		c[p.state]++
	}
	return c
}

// Summary is what the node condition says: ok while no peer is down, and a short
// message naming the peers down (and degraded) and why, e.g. "2 of 40 peers down:
// 198.18.3.0/24 encap-blocked UDP 8472, ...".
func (r Report) Summary() (ok bool, msg string) {
	var down, degraded []string
	for _, p := range r.Peers {
		switch p.State {
		case StateDown:
			down = append(down, p.Subnet+" "+p.Reason+why(p))
		case StateDegraded:
			degraded = append(degraded, p.Subnet+" "+p.Reason+why(p))
		}
	}
	n := len(r.Peers)
	var b strings.Builder
	if len(down) > 0 {
		fmt.Fprintf(&b, "%d of %d peers down: %s", len(down), n, strings.Join(down, ", "))
	} else {
		fmt.Fprintf(&b, "%d of %d peers reachable", n, n)
	}
	if len(degraded) > 0 {
		fmt.Fprintf(&b, "; %d degraded: %s", len(degraded), strings.Join(degraded, ", "))
	}
	if w := r.Ways(); w.Punched+w.Relayed > 0 {
		fmt.Fprintf(&b, "; ways: %d direct, %d punched, %d relayed", w.Direct, w.Punched, w.Relayed)
	}
	return len(down) == 0, b.String()
}

// Ways counts the peers on each way.
type Ways struct {
	Direct  int `json:"direct"`
	Punched int `json:"punched"`
	Relayed int `json:"relayed"`
}

// Ways counts the peers by Path: punched, relayed ("relay via ..."), and direct (every
// other, a backend that does not choose its ways included).
func (r Report) Ways() Ways {
	var w Ways
	for _, p := range r.Peers {
		switch {
		case p.Path == "punched":
			w.Punched++
		case strings.HasPrefix(p.Path, "relay"):
			w.Relayed++
		default:
			w.Direct++
		}
	}
	return w
}

// ErrNotSummary is wrapped by ParseSummary's error for a message Summary did not write.
var ErrNotSummary = errors.New("not a peers summary")

// Summarized is a Summary message read back (a node's condition, for weftd status).
type Summarized struct {
	Peers int `json:"peers"`
	// Unreachable is how many peers are down.
	Unreachable int `json:"unreachable"`
	// Cut says the message was cut short (a node condition's is at most 256 bytes,
	// ending in "…"): the counts hold, the lists and ways may lack their end.
	Cut bool `json:"cut,omitempty"`
	// Down and Degraded name a peer each as Summary does: "subnet reason[ detail]".
	Down     []string `json:"down,omitempty"`
	Degraded []string `json:"degraded,omitempty"`
	// Ways are the ones the message gives; without any, every peer is direct.
	Ways Ways `json:"ways"`
}

// ParseSummary reads a message Summary wrote.
func ParseSummary(msg string) (Summarized, error) {
	bad := func(why string) (Summarized, error) {
		return Summarized{}, fmt.Errorf("%w: %q: %s", ErrNotSummary, msg, why)
	}
	var s Summarized
	if m, ok := strings.CutSuffix(msg, "…"); ok {
		msg, s.Cut = m, true
	}
	parts := strings.Split(msg, "; ")
	if s.Cut && len(parts) > 1 {
		parts = parts[:len(parts)-1] // the part cut short
	}
	head, list, isDown := strings.Cut(parts[0], " peers down: ")
	if !isDown {
		var ok bool
		if head, ok = strings.CutSuffix(parts[0], " peers reachable"); !ok {
			return bad("neither reachable nor down")
		}
	}
	var n, of int
	if _, err := fmt.Sscanf(head, "%d of %d", &n, &of); err != nil || n < 0 || of < n {
		return bad("no count of peers")
	}
	s.Peers = of
	if isDown {
		s.Unreachable = n
		s.Down = strings.Split(list, ", ")
		switch {
		case s.Cut && len(parts) == 1:
			s.Down = s.Down[:len(s.Down)-1] // the peer cut short
		case len(s.Down) != n:
			return bad("the count of peers down is not the list's")
		}
	}
	ways := false
	for _, p := range parts[1:] {
		if w, ok := strings.CutPrefix(p, "ways: "); ok {
			if _, err := fmt.Sscanf(w, "%d direct, %d punched, %d relayed", &s.Ways.Direct, &s.Ways.Punched, &s.Ways.Relayed); err != nil {
				return bad("ways unreadable")
			}
			ways = true
			continue
		}
		if _, list, ok := strings.Cut(p, " degraded: "); ok {
			s.Degraded = strings.Split(list, ", ")
			continue
		}
		return bad("unknown part " + strconv.Quote(p))
	}
	if !ways && !s.Cut {
		s.Ways.Direct = s.Peers
	}
	return s, nil
}

// why is the short cause after a reason: the port of a blocked tunnel, the MTU found.
func why(p Peer) string {
	switch p.Reason {
	case ReasonEncap:
		if i := strings.LastIndexByte(p.Endpoint, ':'); i >= 0 {
			return " UDP " + p.Endpoint[i+1:]
		}
	case ReasonPathMTU:
		return " " + strconv.Itoa(p.PathMTU)
	}
	return ""
}
