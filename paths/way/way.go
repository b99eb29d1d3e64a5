// Package way holds how a host with a site reaches one peer outside it, and decides
// on evidence when that changes: direct at what the peer publishes, punched through
// both NATs, or through a relay. One State per peer, kept by the backend that owns
// the peer under its lock; Decide reads the evidence the backend gathered (the
// device, the path socket's pings, the peer's lease) and the time, changes the
// State, and says what the backend must do (Action): configure the device on a new
// way, ping, ask the peer to punch. It does no I/O, so each decision is table-tested.
package way

import (
	"net/netip"
	"strings"
	"time"
)

// Way is how we reach a peer outside our site. A host with a site takes them in this
// order, each on the evidence that the one before gives no answer; without a site
// every peer is direct, as in flanneld.
type Way int

const (
	Direct  Way = iota // its published address: PublicIP (a peer that says never dial it dials us)
	Punched            // its NAT's outside address (lease Outside), both of us dialing together
	Relay              // through a relay that forwards its datagrams as they are
)

func (v Way) String() string {
	if v < Direct || v > Relay {
		return "unknown"
	}
	return [...]string{"direct", "punched", "relay"}[v]
}

// The timings of the choice.
const (
	// TryFor: a way the probes have not found answering within this is left for
	// the next (the probes' rounds are 2 s apart); longer where the probes read the
	// paths more slowly (the prober's pace, on thousands of peers): their first
	// round plus TryForSlack. Evidence.TryNew carries the one in force.
	TryFor      = 8 * time.Second
	TryForSlack = 3 * time.Second
	// ProbedWithin: nor is a way left before the probes judged a round on it
	// (State.JudgedAt), unless it has had this long: their first rounds wait their
	// turn at the probe rate. (A path the prober cannot probe, with no raw socket
	// for its family, is told judged at once.)
	ProbedWithin = 2 * time.Minute
	// directEvery: while another way is used, the direct way is pinged on the path
	// port this often; directAnswers answers in a row move the peer back to it.
	directEvery   = 5 * time.Second
	directAnswers = 2
	// DirectBackoff: after a move back to direct that brought no answer, the next
	// waits this long.
	DirectBackoff = 30 * time.Second
	// peerCatchUp: after we moved back to direct on the path port's answers, the peer
	// may still relay to us until its own pings there have answered (directAnswers
	// rounds of directEvery, one more for the phase between us): for this long we
	// dial it directly again rather than follow it to its relay. Two hosts that
	// followed each other's incoming way at once stayed relayed for a minute.
	peerCatchUp = directEvery * (directAnswers + 1)
	// measureEvery: a relayed peer is pinged through every relay this often; a
	// relay without an answer for relayStale is given up.
	measureEvery = 2 * time.Second
	relayStale   = 7 * time.Second
	// ChooseEvery is the chooser's tick.
	ChooseEvery = time.Second
	// A relayed peer that publishes its NAT's address is asked to punch again
	// ("punch now" through the relay) PunchFirst after it was relayed, then at
	// twice the wait each time up to PunchMax; for punchWindow after a punch (ours
	// or the peer's) both ping each other's path socket at its NAT's address, and
	// the first answer moves the peer to punched. WireGuard stays on the relay until
	// the path port answered, so an attempt that gets no answer costs pings only;
	// one whose path port answers while WireGuard's port cannot pass (two hosts
	// behind one NAT on the same inside ports) costs up to TryFor of traffic.
	PunchFirst  = 5 * time.Second
	PunchMax    = 60 * time.Second
	punchWindow = 6 * time.Second
	// punchHoldMax: after punched ways in a row that WireGuard found silent (each
	// costs up to TryFor of traffic), the next move waits PunchFirst doubled per
	// failure, up to this.
	punchHoldMax = 10 * time.Minute
	// RelayFirstAfter: a new peer whose first way (direct; a way kept over a
	// restart is trusted for TryFor instead) has neither handshaken nor answered
	// the probes or the path port this long is relayed at once where a relay
	// answers for it, and the first way is tried beside the relay on the path
	// port: pinged every ChooseEvery for relayFirstFast, then every directEvery.
	// It was TryFor (8 s) per way before the first packet moved, then 1.5 s while
	// only the probes (a round waits 1 s for its answers) could keep a working
	// direct way from the relay; the path port's first answer now does, within a
	// round trip.
	RelayFirstAfter = time.Second
	relayFirstFast  = 10 * time.Second
	// punchAfterRelayFirst: a peer relayed first that publishes its NAT's address is
	// asked to punch ("punch now") this long after, not PunchFirst: the first
	// punch then comes within seconds of the start. (An attempt through WireGuard
	// alone still follows TryNew after the first way, punchAfterFirst, if the path
	// port gave no answer by then.)
	punchAfterRelayFirst = time.Second
)

// State is how we reach one peer outside our site, and the evidence for it. Its
// owner (the backend, under its lock) changes it through Decide and the methods
// below; the fields are open for reading (GET /peers, the ways file) and for tests.
type State struct {
	Way      Way
	Since    time.Time // when this way was taken
	Answered bool      // the probes found the peer answering since
	UpAt     time.Time // when the probes last found it answering
	DownAt   time.Time // when the probes last found it down
	// JudgedAt: when the probes judged their first round on the peer's path
	// (answered or not; each new path has one).
	JudgedAt time.Time
	Why      string // why this way, for GET /peers
	// The relay of Relay: its lease's key and its path port.
	Relay     netip.Prefix
	RelayAddr netip.AddrPort
	Measured  time.Time // pings sent through the relays
	// Pings on the direct way while another is used.
	DirectPinged time.Time
	DirectOK     int
	DirectAfter  time.Time
	// DirectBack: this direct way was taken on the path port's answers.
	DirectBack bool
	// Punching again while relayed: the next "punch now" is due at PunchAt, the
	// wait after it is PunchWait; PunchSeen is the peer's last punch we took;
	// while PunchUntil, its path socket at PunchAddr is pinged since PunchSince.
	PunchAt, PunchSeen     time.Time
	PunchWait              time.Duration
	PunchUntil, PunchSince time.Time
	PunchAddr              netip.AddrPort
	// RoamedOut: while relayed, when the device first had the peer's NAT address
	// as its endpoint (the peer's datagrams came from there).
	RoamedOut time.Time
	// First: the peer is on its first way since its lease came (relay first may
	// apply); RelayFirst: it was relayed first, and since when; FirstSince: the
	// same moment, until the punched attempt through WireGuard alone (TryNew after
	// it, if the path port gave no answer) is spent.
	First      bool
	RelayFirst time.Time
	FirstSince time.Time
	// PunchHold: after a punched way the path port's answers chose got no answer
	// through WireGuard, no move on such answers before this (the path socket's NAT
	// mapping held where WireGuard's did not: another host behind the same NAT took
	// WireGuard's port toward this peer).
	PunchHold  time.Time
	PunchFails int // punched ways in a row that got no answer through WireGuard
}

// New is the state of a peer whose lease just came: direct, its first way.
func New(now time.Time) *State {
	return &State{Since: now, Why: "direct: what the peer publishes", First: true}
}

// Move moves the peer to way v, saying why, at now, and reports whether the way
// changed; the owner configures the device on it. Leaving the relay forgets it.
func (s *State) Move(v Way, why string, now time.Time) bool {
	changed := s.Way != v
	s.Way, s.Since, s.Answered, s.Why, s.DirectBack = v, now, false, why, false
	s.RoamedOut = time.Time{}
	s.PunchUntil, s.First, s.RelayFirst, s.FirstSince = time.Time{}, false, time.Time{}, time.Time{}
	if v == Relay {
		s.PunchAt = now.Add(max(s.PunchWait, PunchFirst)) // punchAgain's next try
	} else {
		s.Relay, s.RelayAddr = netip.Prefix{}, netip.AddrPort{}
	}
	return changed
}

// Resume starts the peer on a way an earlier weftd kept for it (relay: via r at
// addr); it is trusted for TryNew, as it worked.
func (s *State) Resume(v Way, r netip.Prefix, addr netip.AddrPort, why string) {
	s.Way, s.Why, s.First = v, why, false
	if v == Relay {
		s.Relay, s.RelayAddr = r, addr
	}
}

// Probed is what the probes found of the way in use at now: answering (up) or not.
func (s *State) Probed(up bool, now time.Time) {
	if up {
		s.Answered, s.UpAt = true, now
	} else {
		s.Answered, s.DownAt = false, now
	}
}

// FirstRound notes that the probes judged their first round on the peer's path, at
// now: the way in use has been probed.
func (s *State) FirstRound(now time.Time) { s.JudgedAt = now }

// PunchSoon has a relayed peer try punching at the next decision, for the reason
// why; with our NAT mapping each destination anew (maps says how) it cannot work,
// and the way's Why says so instead. A peer relayed first is left to its schedule.
func (s *State) PunchSoon(why, maps string, now time.Time) {
	if s.Way != Relay || !s.FirstSince.IsZero() {
		return
	}
	if maps != "" {
		s.Why = notPunched(s.Why, why+"; not punched: "+maps)
		return
	}
	s.PunchAt, s.PunchWait = now, 0
}

// Device is what the device says of the peer now.
type Device struct {
	Known     bool // the device has the peer (else the rest is empty)
	Endpoint  netip.AddrPort
	Handshake time.Time
}

// Applied is the endpoint we configured on the device for the peer.
type Applied struct {
	Set      bool // the peer is configured
	Learn    bool // no endpoint: the one WireGuard learns
	Endpoint netip.AddrPort
}

// Handshook reports whether the device handshook with the peer since its way was
// taken and since the probes last found it down, at the endpoint that way
// configured (a handshake through the relay while we punch, the device roaming to
// it, is not the punched way's).
func (s *State) Handshook(dev Device, a Applied) bool {
	if !a.Set || a.Learn || !a.Endpoint.IsValid() {
		return false
	}
	return dev.Known && dev.Handshake.After(later(s.Since, s.DownAt)) && dev.Endpoint == a.Endpoint
}

// notPunched is a relayed way's why with the last word on punching, said once.
func notPunched(why, word string) string {
	if i := strings.Index(why, "; not punched"); i >= 0 {
		why = why[:i]
	}
	if i := strings.Index(why, "; punched "); i >= 0 {
		why = why[:i]
	}
	return why + "; " + strings.TrimPrefix(word, "; ")
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
