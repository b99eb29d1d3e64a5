// Package paths probes the path to every peer the backend carries traffic to, the way
// pods' packets go, and names what breaks it: the Prober (prober.go) sends ICMP echoes
// through the tunnel from our overlay address to the peer's, full-size ones with DF to
// check the path MTU, and echoes to the peer's underlay address when the tunnel is
// silent; each peer's rounds are judged in peer.go, the MTU searched in mtu.go, the
// probes' wire format is wire.go's, and the socket is platform code. What it finds is
// a Report (GET /peers), a table (`weftd peers`), a Summary (the node condition) and a
// log line per change.
//
// Probes sit beside the backends: they read the paths a backend programmed
// (encap.PathLister) and, to repair a path MTU, set a route's MTU through the backend
// (encap.RouteMTUSetter), which keeps it in what it wants in the kernel.
package paths

import (
	"time"
)

// A peer's states.
const (
	StateUnknown  = "unknown"  // not probed yet
	StateUp       = "up"       // answers through the tunnel
	StateDegraded = "degraded" // answers, but not as it should (see Reason)
	StateDown     = "down"     // does not answer through the tunnel
)

// Reasons a peer is degraded or down.
const (
	// ReasonUnderlay: the peer's public address does not answer at all.
	ReasonUnderlay = "underlay-unreachable"
	// ReasonEncap: the peer's public address answers, the tunnel does not.
	ReasonEncap = "encap-blocked"
	// ReasonPathMTU: small packets pass through the tunnel, full-size ones do not.
	ReasonPathMTU = "path-mtu"
	// ReasonLoss: the tunnel answers, but loses many probes.
	ReasonLoss = "packet-loss"
	// ReasonNoRoute: our kernel has no route to the peer (the probe cannot be sent).
	ReasonNoRoute = "no-route"
)

// Peer is one peer subnet as probed: GET /peers' entries. The JSON keys are a
// contract (scripts and the node condition read them): add, never rename.
type Peer struct {
	Subnet    string  `json:"subnet"`
	PublicIP  string  `json:"publicIP"`
	Backend   string  `json:"backend"`
	State     string  `json:"state"`
	Reason    string  `json:"reason"`
	Detail    string  `json:"detail"`
	RTTMicros int64   `json:"rttMicros"`
	Loss      float64 `json:"loss"`
	// PathMTU is the largest packet found to pass through the tunnel (0: not known).
	PathMTU int `json:"pathMTU"`
	// RouteMTU is the MTU weft set on the route to the subnet (0: none, the device's).
	RouteMTU int `json:"routeMTU"`
	// Path is direct, punched (direct through NAT, both hosts dialing) or "relay via
	// <subnet>"; PathDetail says why in one sentence, where the backend chooses.
	Path       string    `json:"path"`
	PathDetail string    `json:"pathDetail"`
	Endpoint   string    `json:"endpoint"`
	Since      time.Time `json:"since"`
	// LastHandshake is the tunnel's last handshake (RFC 3339; empty: none, or a
	// tunnel without handshakes).
	LastHandshake string `json:"lastHandshake"`
}

// Report is GET /peers' body.
type Report struct {
	Peers []Peer `json:"peers"`
}

// Config is how the Prober probes.
type Config struct {
	// Interval is the time between two rounds to one peer while the rate allows it
	// (default 2 s); with many peers a round takes longer (see Rate).
	Interval time.Duration
	// Rate is the most probe packets sent per second (default 130); rounds are
	// planned on 90 % of it: 5,000 peers at about 1.2 packets a round (the full-size
	// probe every fifth round once rounds are longer than 5 s; 1.3 for peers down) are
	// each probed about every 51 s (55 s at most: rounds are never planned longer).
	Rate int
	// Timeout is how long a round waits for its answers (default 1 s).
	Timeout time.Duration
	// ObserveRTT, when set, is given every round trip measured through a tunnel.
	ObserveRTT func(time.Duration)
}

func (c Config) withDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = 2 * time.Second
	}
	if c.Rate <= 0 {
		c.Rate = 130
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Second
	}
	if c.Timeout > c.Interval {
		c.Timeout = c.Interval
	}
	return c
}
