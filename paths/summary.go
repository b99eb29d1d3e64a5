package paths

import (
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
	return len(down) == 0, b.String()
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
