package way

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/weftnet/weft/transport/relay"
)

// Candidate is a host that may relay for us (it answers on its path port), with
// what the pings to the peer through it found.
type Candidate struct {
	Key  netip.Prefix   // its lease
	Addr netip.AddrPort // its path port
	M    relay.Measure  // pings to the peer through it
}

// Evidence is everything a decision about one peer reads: the backend gathers it,
// and Decide does nothing else to learn about the world.
type Evidence struct {
	Now time.Time
	// TryNew is how long a new way is given to answer (TryFor, or longer where the
	// probes' first round is).
	TryNew time.Duration
	// Maps is why our NAT cannot be punched through (it gives each destination a
	// port of its own), empty when it can.
	Maps string

	// The peer's lease: the endpoint its direct way dials (DirectEndpoint); whether
	// it has an IPv4 address we may ping directly on its path port (Dialable); its
	// NAT's outside address (Outside, invalid when it publishes none).
	DirectEndpoint netip.AddrPort
	Dialable       bool
	Outside        netip.AddrPort

	Device  Device
	Applied Applied
	// RelayedIn: the device's endpoint for the peer is our loopback stand-in for
	// it, so its datagrams come to us through a relay: RelayedVia (its path port),
	// the lease RelayedViaKey.
	RelayedIn     bool
	RelayedVia    netip.AddrPort
	RelayedViaKey netip.Prefix

	// Candidates are the hosts that may relay for us, the peer itself left out,
	// each with the pings to the peer through it.
	Candidates []Candidate
	// ViaRelay: the pings to the peer through the State's relay (RelayAddr).
	ViaRelay relay.Measure
	// DirectPings: the pings on the direct way's path port.
	DirectPings relay.Measure
	// Punch is the peer's last "punch now"; AtPunch the pings to the State's
	// PunchAddr, AtAsked those to the address Punch names.
	Punch            relay.Punch
	AtPunch, AtAsked relay.Measure
	// OurPath is where our path socket is seen from outside our NAT, by each host
	// we said hello to (OurPathBy) and by any of them (OurPath).
	OurPathBy map[netip.Prefix]netip.AddrPort
	OurPath   netip.AddrPort
}

// Kind is what an Action asks of the backend.
type Kind int

const (
	// Take: the peer moved to the State's Way (Changed: another than before);
	// configure the device on it.
	Take Kind = iota
	// DialAgain: configure the endpoint we applied again (the device roamed away).
	DialAgain
	// NewRelay: a relayed peer goes through another relay now (the State's).
	NewRelay
	// PingVia: ping the peer through the relay at Addr.
	PingVia
	// PingDirect: ping the peer's path port at its direct address.
	PingDirect
	// PingAt: ping the peer's path socket at Addr (its NAT's address).
	PingAt
	// PunchNow: ask the peer, through the relay at Via, to punch with our path
	// socket at Addr.
	PunchNow
)

// Action is one thing Decide asks of the backend, in order.
type Action struct {
	Kind    Kind
	Way     Way    // Take: the way taken
	Why     string // Take: why
	Changed bool   // Take: the way changed
	// Unprobed (Take): the way left had no answer in its time, and the probes had
	// not judged a round on it yet: its time was shorter than their first round.
	Unprobed bool
	Addr     netip.AddrPort // PingVia, PingAt, PunchNow
	Via      netip.AddrPort // PunchNow
	RTT      time.Duration  // NewRelay: the round trip through it
}

// Decide moves the peer's way on the evidence and returns what the backend must do
// about it, in order (a Take before the pings that follow it).
func (s *State) Decide(ev *Evidence) []Action {
	d := decision{s: s, ev: ev}
	d.step()
	return d.out
}

// RelayFirstDue reports whether a peer is new and due for relay first: the relays
// have not been pinged for it in the last ChooseEvery (they are from the start, as
// soon as there is one), or it has gone RelayFirstAfter at now without an answer.
func (s *State) RelayFirstDue(now time.Time) bool {
	return s.First && !s.Answered && (s.Way == Direct || s.Way == Punched) &&
		(now.Sub(s.Measured) >= ChooseEvery || now.Sub(s.Since) >= RelayFirstAfter)
}

// DecideRelayFirst is the relay-first part of Decide alone, for the checks between
// the chooser's ticks.
func (s *State) DecideRelayFirst(ev *Evidence) []Action {
	d := decision{s: s, ev: ev}
	if !d.followIn() {
		d.relayFirst()
	}
	return d.out
}

// decision is one Decide: the state, the evidence, and the actions so far.
type decision struct {
	s   *State
	ev  *Evidence
	out []Action
}

func (d *decision) do(a Action) { d.out = append(d.out, a) }

// take moves the peer to way v, saying why.
func (d *decision) take(v Way, why string) {
	d.do(Action{Kind: Take, Way: v, Why: why, Changed: d.s.Move(v, why, d.ev.Now)})
}

// leave moves the peer to way v on the verdict that its way failed, saying why and
// whether the probes had judged that way at all.
func (d *decision) leave(v Way, why string, unprobed bool) {
	d.do(Action{Kind: Take, Way: v, Why: why, Changed: d.s.Move(v, why, d.ev.Now), Unprobed: unprobed})
}

// step moves the peer's way on the evidence.
func (d *decision) step() {
	s, ev, now := d.s, d.ev, d.ev.Now
	if d.followIn() {
		return
	}
	// The peer reaches us from its NAT's address while we relay (it dials our NAT: it
	// punched, or kept the punched way over its restart): our device roamed there on
	// its authenticated datagrams, and our answers go back through the mapping they
	// came by. Still so a tick later: punched is the way; say so.
	if ev.Device.Known && s.Way == Relay && ev.Outside.IsValid() && ev.Device.Endpoint == ev.Outside {
		if s.RoamedOut.IsZero() {
			s.RoamedOut = now
		} else if now.Sub(s.RoamedOut) >= ChooseEvery {
			d.take(Punched, fmt.Sprintf("punched: the peer's datagrams come to us from its NAT's address (%v)", ev.Outside))
			return
		}
	} else {
		s.RoamedOut = time.Time{}
	}
	if s.First && (s.Way == Direct || s.Way == Punched) {
		if d.relayFirst() {
			return
		}
	}
	// A handshake on this way's endpoint since it was taken is an answer: the
	// probes, which visit each peer at most every 10 s on a large cluster, need not
	// come first (TryNew would leave a working way they had not reached yet).
	if !s.Answered && s.Handshook(ev.Device, ev.Applied) {
		s.Answered, s.UpAt = true, now
	}
	if d.verdict() {
		return
	}
	if s.Way == Punched && s.Answered {
		s.PunchWait, s.PunchFails = 0, 0 // a punch that held: the next relayed spell starts again at PunchFirst
	}
	if s.Way == Relay {
		d.measureRelays()
		if d.punchAfterFirst() || d.punchAgain() {
			return
		}
	}
	d.pingDirect()
}

// followIn: the peer relays to us: its datagrams come through a relay, and our
// device took our loopback socket as its endpoint. Take that way too, and say so;
// but while we punch (the peer may have moved to punching a moment after us, its
// last relayed datagrams still on their way), dial its NAT again instead, for
// TryNew; and after a move back to direct on the path port's answers, dial it
// directly again for peerCatchUp, the time its own pings there take to move it
// too. It reports whether it moved the peer.
func (d *decision) followIn() bool {
	s, ev, now := d.s, d.ev, d.ev.Now
	if !ev.Device.Known || s.Way == Relay || !ev.RelayedIn {
		return false
	}
	// Answered or not: the probes cross the tunnel whichever way it goes, and find
	// it up through the relay the device roamed back to.
	punching := s.Way == Punched && now.Sub(s.Since) < ev.TryNew
	catchingUp := s.Way == Direct && s.DirectBack && now.Sub(s.Since) < peerCatchUp
	if punching || catchingUp {
		d.do(Action{Kind: DialAgain})
		return false
	}
	why := fmt.Sprintf("relay via %v: the peer's datagrams come to us through it", ev.RelayedViaKey)
	if s.Why != "" {
		why += "; before: " + s.Why
	}
	first := s.First
	s.Relay, s.RelayAddr = ev.RelayedViaKey, ev.RelayedVia
	d.take(Relay, why)
	s.Answered = true
	if first {
		s.RelayFirst = now // the peer relayed first: try its first way as fast
	}
	return true
}

// verdict leaves a way that failed: no answer for TryNew, or found down after it
// answered. A new way is given TryNew: the probes call it down after a few silent
// rounds, sooner than a punched pair's two sides both dial. It reports whether the
// decision ends there (direct left for punched).
func (d *decision) verdict() bool {
	s, ev, now := d.s, d.ev, d.ev.Now
	foundDown := s.DownAt.After(s.Since) && s.UpAt.After(s.Since) && s.DownAt.After(s.UpAt)
	if s.Answered || (now.Sub(s.Since) < ev.TryNew && !foundDown) {
		return false
	}
	// Nor before the probes have judged a round on it, up to ProbedWithin: on a
	// large cluster their first rounds wait their turn at the probe rate (5,000
	// new peers at start: a minute and more), and a working way would be left
	// unprobed.
	if !foundDown && !s.JudgedAt.After(s.Since) && now.Sub(s.Since) < ProbedWithin {
		return false
	}
	lost := fmt.Sprintf("no answer for %d s", int(now.Sub(s.Since).Seconds()))
	unprobed := !s.JudgedAt.After(s.Since)
	if s.DownAt.After(s.Since) {
		lost = "the probes found it down"
	}
	switch s.Way {
	case Direct:
		// Pinged on the path port from now on; a failed move back keeps its
		// DirectBackoff.
		s.DirectAfter = later(s.DirectAfter, now)
		if ev.Outside.IsValid() && ev.Outside != ev.DirectEndpoint {
			d.leave(Punched, fmt.Sprintf("punched: direct (%v) gave %s; both dial each other's NAT", ev.DirectEndpoint, lost), unprobed)
			return true
		}
		d.leave(Relay, fmt.Sprintf("relay: direct (%v) gave %s and the peer publishes no NAT address to punch", ev.DirectEndpoint, lost), unprobed)
	case Punched:
		ep := ev.Outside
		if ev.Applied.Set {
			ep = ev.Applied.Endpoint // the address we punched at
		}
		why := fmt.Sprintf("relay: punched (%v) gave %s", ep, lost)
		if ev.Maps != "" {
			why += "; " + ev.Maps
		}
		// A punched way that never answered: path answers are not trusted again
		// for punching this peer for a hold that doubles with each such failure
		// in a row. One that answered and then died (a NAT lost its mappings, a
		// link failed) worked: no hold, the schedule starts again.
		neverAnswered := !s.UpAt.After(s.Since)
		d.leave(Relay, why, unprobed)
		if neverAnswered {
			s.PunchFails++
			s.PunchHold = now.Add(min(PunchFirst<<min(s.PunchFails, 16), punchHoldMax))
			s.PunchAt = later(s.PunchAt, s.PunchHold)
		} else {
			s.PunchFails, s.PunchHold = 0, time.Time{}
		}
	}
	return false
}

// pingDirect pings the direct way on the path port while another is used, and
// moves the peer back to it after directAnswers answers in a row.
func (d *decision) pingDirect() {
	s, ev, now := d.s, d.ev, d.ev.Now
	every := directEvery
	if !s.RelayFirst.IsZero() && now.Sub(s.RelayFirst) < relayFirstFast {
		every = ChooseEvery
	}
	if s.Way == Direct || !ev.Dialable || now.Before(s.DirectAfter) || now.Sub(s.DirectPinged) < every {
		return
	}
	if !s.DirectPinged.IsZero() && ev.DirectPings.At.After(s.DirectPinged) {
		s.DirectOK++
	} else {
		s.DirectOK = 0
	}
	if s.DirectOK >= directAnswers {
		s.DirectOK, s.DirectPinged = 0, time.Time{}
		s.DirectAfter = now.Add(DirectBackoff) // if it fails again, not before this
		d.take(Direct, fmt.Sprintf("direct: answers again (%d pings on the path port in a row)", directAnswers))
		s.DirectBack = true
		return
	}
	s.DirectPinged = now
	d.do(Action{Kind: PingDirect})
}

// punchAgain tries punching with a relayed peer again, on the schedule and when
// the peer asks, by pinging its path socket at its NAT's address while it pings
// ours; an answer moves the peer to punched. It reports whether it moved it. Only a
// peer that publishes its NAT's address is tried, and only while our NAT maps one
// port for every destination (else the peer's pings could not find ours; the way's
// why says so).
func (d *decision) punchAgain() bool {
	s, ev, now := d.s, d.ev, d.ev.Now
	if !ev.Outside.IsValid() || !s.RelayAddr.IsValid() {
		return false
	}
	if ev.Maps != "" {
		if !strings.Contains(s.Why, "; not punched") {
			s.Why = notPunched(s.Why, "not punched: "+ev.Maps)
		}
		return false
	}
	if s.PunchAt.IsZero() {
		s.PunchAt = now.Add(PunchFirst)
	}
	ours, ok := ev.OurPathBy[s.Relay]
	if !ok || !ours.IsValid() {
		ours = ev.OurPath
	}
	if !ours.IsValid() && !now.Before(s.PunchAt) {
		// Not yet told where our path socket is seen from outside: a "punch now"
		// would name no address. Try at the next tick rather than lose the attempt.
		s.PunchAt = now.Add(ChooseEvery)
	}
	at := ev.AtPunch
	ask := false
	if p := ev.Punch; p.At.After(s.PunchSeen) && p.Addr.IsValid() {
		// The peer asks: ping it there; outside an attempt of ours, answer with
		// where it finds ours.
		s.PunchSeen, s.PunchAddr, at = p.At, p.Addr, ev.AtAsked
		if !now.Before(s.PunchUntil) {
			ask, s.PunchSince = true, now
		}
		s.PunchUntil = now.Add(punchWindow)
	}
	if !now.Before(s.PunchAt) {
		ask = true
		s.PunchWait = min(max(2*s.PunchWait, PunchFirst), PunchMax)
		s.PunchAt = now.Add(s.PunchWait)
		s.PunchUntil, s.PunchSince = now.Add(punchWindow), now
	}
	if ask && ours.IsValid() {
		d.do(Action{Kind: PunchNow, Via: s.RelayAddr, Addr: ours})
	}
	if !s.PunchUntil.IsZero() && !now.Before(s.PunchUntil) {
		s.PunchUntil = time.Time{}
		word := "punched tried on the path port: no answer from the peer's NAT"
		if s.PunchAddr.IsValid() {
			word = fmt.Sprintf("punched tried on the path port at %v: no answer", s.PunchAddr)
		}
		s.Why = notPunched(s.Why, word)
	}
	if s.PunchUntil.IsZero() || !s.PunchAddr.IsValid() {
		return false
	}
	if at.At.After(s.PunchSince) && !now.Before(s.PunchHold) {
		s.PunchUntil = time.Time{}
		d.take(Punched, fmt.Sprintf("punched: the peer's path port answered at its NAT's address (%v, %v) while both pinged; both dial each other's NAT",
			s.PunchAddr, at.RTT.Round(10*time.Microsecond)))
		return true
	}
	d.do(Action{Kind: PingAt, Addr: s.PunchAddr})
	return false
}

// relayFirst relays a new peer at once while its first way has not answered, once a
// relay answers for it: pings go through every candidate, and to a direct way's
// path port, from the start, and after RelayFirstAfter without a handshake or an
// answer on the first way (the probes' or the path port's) the peer moves to the
// relay with the shortest round trip. The first way is tried beside it: the direct
// way by pings on the path port (fast for relayFirstFast), the punched way by
// "punch now" soon. It reports whether it moved the peer.
func (d *decision) relayFirst() bool {
	s, ev, now := d.s, d.ev, d.ev.Now
	if s.Answered {
		s.First = false
		return false
	}
	if s.Handshook(ev.Device, ev.Applied) {
		return false // the way works; the probes will say so
	}
	// Every tick, not every measureEvery: the first relay's answer is what the
	// first packet waits for.
	if s.Way == Direct && ev.DirectPings.At.After(s.Since) {
		// Its path port answers: direct works, and the probes will say so; no
		// more pings for relay first (on a large cluster the probes' first round
		// comes seconds later, and every new peer would be relayed meanwhile).
		s.First = false
		return false
	}
	if len(ev.Candidates) > 0 && now.Sub(s.Measured) >= ChooseEvery {
		s.Measured = now
		d.pingRelays()
	}
	if s.Way == Direct && ev.Dialable && now.Sub(s.DirectPinged) >= ChooseEvery {
		s.DirectPinged = now
		d.do(Action{Kind: PingDirect})
	}
	if now.Sub(s.Since) < RelayFirstAfter {
		return false
	}
	best, ok := d.bestRelay()
	if !ok {
		return false
	}
	var ep netip.AddrPort
	if ev.Applied.Set {
		ep = ev.Applied.Endpoint
	}
	why := fmt.Sprintf("relay via %v: first, while %s (%v) has not answered in %d ms; tried beside it",
		best.Key, s.Way, ep, now.Sub(s.Since).Milliseconds())
	changed := s.Move(Relay, why, now)
	s.Relay, s.RelayAddr, s.RelayFirst, s.FirstSince = best.Key, best.Addr, now, now
	// Punch soon, through the relay: both sides ping each other's path port at its
	// NAT's address, and the first answer moves WireGuard there.
	s.PunchAt = now.Add(punchAfterRelayFirst)
	d.do(Action{Kind: Take, Way: Relay, Why: why, Changed: changed})
	return true
}

// punchAfterFirst moves a peer relayed first to its punched way TryNew after its
// first way was taken, as without relay first, when it publishes a NAT address and
// we have not punched it since. It reports whether it moved it.
func (d *decision) punchAfterFirst() bool {
	s, ev, now := d.s, d.ev, d.ev.Now
	if s.FirstSince.IsZero() || now.Before(s.FirstSince.Add(ev.TryNew)) || !ev.Outside.IsValid() {
		return false
	}
	s.FirstSince = time.Time{}
	if ev.Maps != "" {
		s.Why = notPunched(s.Why, "not punched: "+ev.Maps)
		return false
	}
	d.take(Punched, fmt.Sprintf("punched: relayed first, direct gave no answer for %d s; both dial each other's NAT (%v)",
		int(ev.TryNew.Seconds()), ev.Outside))
	return true
}

// bestRelay is the candidate with the shortest round trip to the peer whose pings
// answered lately; ok is false when none did.
func (d *decision) bestRelay() (best Candidate, ok bool) {
	for _, c := range d.ev.Candidates {
		if d.ev.Now.Sub(c.M.At) < relayStale && c.M.NoPeer.Before(c.M.At) && (!ok || c.M.RTT < best.M.RTT) {
			best, ok = c, true
		}
	}
	return best, ok
}

// pingRelays pings the peer through every candidate.
func (d *decision) pingRelays() {
	for _, c := range d.ev.Candidates {
		d.do(Action{Kind: PingVia, Addr: c.Addr})
	}
}

// measureRelays pings a relayed peer through every candidate and keeps, or
// changes, its relay: the one with the shortest round trip through it, until it
// stops answering.
func (d *decision) measureRelays() {
	s, ev, now := d.s, d.ev, d.ev.Now
	isCand := slices.ContainsFunc(ev.Candidates, func(c Candidate) bool { return c.Key == s.Relay })
	cur := ev.ViaRelay
	curOK := s.RelayAddr.IsValid() && isCand &&
		(now.Sub(cur.At) < relayStale || now.Sub(s.Since) < relayStale) && !cur.NoPeer.After(cur.At)
	if best, ok := d.bestRelay(); !curOK && ok {
		why := fmt.Sprintf("relay via %v: the shortest round trip through a relay (%v)", best.Key, best.M.RTT.Round(10*time.Microsecond))
		if s.Relay.IsValid() {
			why = fmt.Sprintf("relay via %v: %v stopped answering; the shortest round trip now (%v)", best.Key, s.Relay, best.M.RTT.Round(10*time.Microsecond))
		} else if s.Why != "" {
			why += "; " + s.Why
		}
		s.Relay, s.RelayAddr, s.Why = best.Key, best.Addr, why
		d.do(Action{Kind: NewRelay, RTT: best.M.RTT})
	}
	if now.Sub(s.Measured) >= measureEvery {
		s.Measured = now
		d.pingRelays()
	}
}
