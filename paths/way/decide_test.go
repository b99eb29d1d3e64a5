package way

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/transport/relay"
)

var (
	t0        = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	direct    = netip.MustParseAddrPort("198.51.100.10:51820")
	outside   = netip.MustParseAddrPort("203.0.113.3:51820")
	relayP    = netip.MustParsePrefix("198.18.9.0/24")
	relayPath = netip.MustParseAddrPort("192.0.2.9:51822")
	relayQ    = netip.MustParsePrefix("198.18.8.0/24")
	relayQAt  = netip.MustParseAddrPort("192.0.2.8:51822")
	ourPath   = netip.MustParseAddrPort("203.0.113.1:51822")
	loopback  = netip.MustParseAddrPort("127.0.0.1:40001")
)

// evidence is what a peer at direct with the NAT address outside shows at now with
// nothing heard: dialed at direct, no relay answering.
func evidence(now time.Time) *Evidence {
	return &Evidence{Now: now, TryNew: TryFor, DirectEndpoint: direct, Dialable: true, Outside: outside,
		Applied: Applied{Set: true, Endpoint: direct}, OurPath: ourPath}
}

// relayedByP is a peer relayed through P since t0.
func relayedByP() *State {
	s := New(t0)
	s.Move(Relay, "relay via p: test", t0)
	s.Relay, s.RelayAddr = relayP, relayPath
	return s
}

// answering is a candidate relay whose pings to the peer answered at at.
func answering(key netip.Prefix, addr netip.AddrPort, at time.Time, rtt time.Duration) Candidate {
	return Candidate{Key: key, Addr: addr, M: relay.Measure{RTT: rtt, At: at}}
}

// kinds lists the kinds of acts, for messages and comparisons.
func kinds(acts []Action) []Kind {
	out := make([]Kind, 0, len(acts))
	for _, a := range acts {
		out = append(out, a.Kind)
	}
	return out
}

// took is the last Take among acts (ok false: none).
func took(acts []Action) (Action, bool) {
	for i := len(acts) - 1; i >= 0; i-- {
		if acts[i].Kind == Take {
			return acts[i], true
		}
	}
	return Action{}, false
}

// TestDecide: one decision per row, from a state and the evidence to the way, the
// reason and what the backend is asked to do.
func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name  string
		state func() *State                      // nil: a direct peer met at t0, past relay first, probed at t0+1s
		ev    func(s *State) *Evidence           // the evidence at the decision
		want  Way                                // the way after it
		why   string                             // in the way's why after it ("" : not checked)
		check func(*testing.T, *State, []Action) // more, where the row needs it
	}{
		{
			name: "direct answers late: the probes' answer before TryNew keeps it",
			state: func() *State {
				s := New(t0)
				s.First = false
				s.Probed(true, t0.Add(TryFor-time.Second))
				return s
			},
			ev:   func(*State) *Evidence { return evidence(t0.Add(TryFor + time.Second)) },
			want: Direct,
		},
		{
			name: "direct silent for TryNew: punched at the NAT's address",
			ev:   func(*State) *Evidence { return evidence(t0.Add(TryFor)) },
			want: Punched, why: "punched: direct (198.51.100.10:51820) gave no answer for 8 s",
			check: func(t *testing.T, s *State, acts []Action) {
				if !slices.Equal(kinds(acts), []Kind{Take}) || !acts[0].Changed {
					t.Fatalf("acts %v, want one Take that changed the way", kinds(acts))
				}
			},
		},
		{
			name: "direct silent, no NAT address: relayed, through the relay that answers",
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(TryFor))
				ev.Outside = netip.AddrPort{}
				ev.Candidates = []Candidate{answering(relayP, relayPath, t0.Add(TryFor-time.Second), time.Millisecond)}
				return ev
			},
			want: Relay, why: "publishes no NAT address to punch",
			check: func(t *testing.T, s *State, acts []Action) {
				if s.Relay != relayP || s.RelayAddr != relayPath {
					t.Fatalf("relay %v at %v, want %v at %v", s.Relay, s.RelayAddr, relayP, relayPath)
				}
				if !slices.Contains(kinds(acts), NewRelay) {
					t.Fatalf("acts %v, want a NewRelay after the Take", kinds(acts))
				}
			},
		},
		{
			name: "a TryNew that follows a slow prober keeps a way the probes have not reached",
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(12 * time.Second))
				ev.TryNew = 13 * time.Second
				return ev
			},
			want: Direct,
		},
		{
			name: "a handshake at the way's endpoint is an answer",
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(TryFor))
				ev.Device = Device{Known: true, Endpoint: direct, Handshake: t0.Add(time.Second)}
				return ev
			},
			want: Direct,
			check: func(t *testing.T, s *State, _ []Action) {
				if !s.Answered {
					t.Fatal("not answered after a handshake at its endpoint")
				}
			},
		},
		{
			name: "a handshake at another endpoint is not the way's answer",
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(TryFor))
				ev.Device = Device{Known: true, Endpoint: loopback, Handshake: t0.Add(time.Second)}
				return ev
			},
			want: Punched,
		},
		{
			name: "punched never answered: relayed, and the path port's word held",
			state: func() *State {
				s := New(t0)
				s.Move(Punched, "punched: test", t0)
				s.FirstRound(t0.Add(time.Second))
				return s
			},
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(TryFor))
				ev.Applied.Endpoint = outside
				return ev
			},
			want: Relay, why: "relay: punched (203.0.113.3:51820) gave no answer",
			check: func(t *testing.T, s *State, _ []Action) {
				if s.PunchFails != 1 || !s.PunchHold.Equal(t0.Add(TryFor+2*PunchFirst)) {
					t.Fatalf("%d failures, hold until %v; want 1, %v", s.PunchFails, s.PunchHold, t0.Add(TryFor+2*PunchFirst))
				}
			},
		},
		{
			name: "punched answered, then found down: relayed, no hold",
			state: func() *State {
				s := New(t0)
				s.Move(Punched, "punched: test", t0)
				s.Probed(true, t0.Add(time.Second))
				s.Probed(false, t0.Add(20*time.Second))
				return s
			},
			ev:   func(*State) *Evidence { return evidence(t0.Add(20 * time.Second)) },
			want: Relay, why: "the probes found it down",
			check: func(t *testing.T, s *State, _ []Action) {
				if s.PunchFails != 0 || !s.PunchHold.IsZero() || !s.PunchAt.Equal(t0.Add(20*time.Second+PunchFirst)) {
					t.Fatalf("failures %d, hold %v, next punch %v; want none, none, PunchFirst on", s.PunchFails, s.PunchHold, s.PunchAt)
				}
			},
		},
		{
			name: "relay lost: the next relay that answers",
			state: func() *State {
				return relayedByP()
			},
			ev: func(*State) *Evidence {
				now := t0.Add(time.Minute)
				ev := evidence(now)
				ev.Outside = netip.AddrPort{}
				ev.ViaRelay = relay.Measure{At: now.Add(-relayStale - time.Second)}
				ev.Candidates = []Candidate{
					{Key: relayP, Addr: relayPath, M: ev.ViaRelay},
					answering(relayQ, relayQAt, now.Add(-time.Second), 2*time.Millisecond),
				}
				return ev
			},
			want: Relay, why: "relay via 198.18.8.0/24: 198.18.9.0/24 stopped answering",
			check: func(t *testing.T, s *State, acts []Action) {
				if s.RelayAddr != relayQAt || !slices.Contains(kinds(acts), NewRelay) {
					t.Fatalf("relay at %v, acts %v; want %v and a NewRelay", s.RelayAddr, kinds(acts), relayQAt)
				}
			},
		},
		{
			name: "relay says it cannot reach the peer, no other: kept, no NewRelay",
			state: func() *State {
				return relayedByP()
			},
			ev: func(*State) *Evidence {
				now := t0.Add(time.Minute)
				ev := evidence(now)
				ev.Outside, ev.Dialable = netip.AddrPort{}, false
				ev.ViaRelay = relay.Measure{At: now.Add(-3 * time.Second), NoPeer: now.Add(-time.Second)}
				ev.Candidates = []Candidate{{Key: relayP, Addr: relayPath, M: ev.ViaRelay}}
				return ev
			},
			want: Relay,
			check: func(t *testing.T, s *State, acts []Action) {
				if slices.Contains(kinds(acts), NewRelay) || s.Relay != relayP {
					t.Fatalf("acts %v, relay %v; want it kept, none better", kinds(acts), s.Relay)
				}
			},
		},
		{
			name: "restart with a kept punched way: trusted for TryNew, kept on a handshake there",
			state: func() *State {
				s := New(t0)
				s.Resume(Punched, netip.Prefix{}, netip.AddrPort{}, "punched: the way that worked before weftd restarted")
				return s
			},
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(TryFor + time.Second))
				ev.Applied.Endpoint = outside
				ev.Device = Device{Known: true, Endpoint: outside, Handshake: t0.Add(500 * time.Millisecond)}
				return ev
			},
			want: Punched, why: "before weftd restarted",
		},
		{
			name: "restart with a kept punched way that no longer answers: relayed after TryNew, not relay first",
			state: func() *State {
				s := New(t0)
				s.Resume(Punched, netip.Prefix{}, netip.AddrPort{}, "punched: the way that worked before weftd restarted")
				return s
			},
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(TryFor - time.Second))
				ev.Applied.Endpoint = outside
				ev.Candidates = []Candidate{answering(relayP, relayPath, t0.Add(time.Second), time.Millisecond)}
				return ev
			},
			want: Punched,
		},
		{
			name:  "relay first: a new peer silent for RelayFirstAfter goes to the relay that answers",
			state: func() *State { return New(t0) },
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(RelayFirstAfter))
				ev.Candidates = []Candidate{
					answering(relayP, relayPath, t0.Add(time.Second), 3*time.Millisecond),
					answering(relayQ, relayQAt, t0.Add(time.Second), time.Millisecond),
				}
				return ev
			},
			want: Relay, why: "relay via 198.18.8.0/24: first, while direct (198.51.100.10:51820) has not answered in 1000 ms",
			check: func(t *testing.T, s *State, _ []Action) {
				now := t0.Add(RelayFirstAfter)
				if s.RelayAddr != relayQAt || !s.RelayFirst.Equal(now) || !s.PunchAt.Equal(now.Add(punchAfterRelayFirst)) {
					t.Fatalf("relay %v, relayed first at %v, punch at %v", s.RelayAddr, s.RelayFirst, s.PunchAt)
				}
			},
		},
		{
			name:  "relay first: before RelayFirstAfter, pings through every candidate and on the path port only",
			state: func() *State { return New(t0) },
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(RelayFirstAfter - time.Millisecond))
				ev.Candidates = []Candidate{answering(relayP, relayPath, t0, time.Millisecond), answering(relayQ, relayQAt, t0, time.Millisecond)}
				return ev
			},
			want: Direct,
			check: func(t *testing.T, s *State, acts []Action) {
				if !slices.Equal(kinds(acts), []Kind{PingVia, PingVia, PingDirect}) {
					t.Fatalf("acts %v, want a ping through each candidate and one on the path port", kinds(acts))
				}
			},
		},
		{
			name:  "relay first: the direct way's path port answered, so it stays direct past RelayFirstAfter",
			state: func() *State { return New(t0) },
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(RelayFirstAfter + time.Second))
				ev.Candidates = []Candidate{answering(relayP, relayPath, t0, time.Millisecond)}
				ev.DirectPings = relay.Measure{At: t0.Add(5 * time.Millisecond), RTT: time.Millisecond}
				return ev
			},
			want: Direct,
			check: func(t *testing.T, s *State, acts []Action) {
				if len(acts) != 0 || s.First || s.RelayFirstDue(t0.Add(RelayFirstAfter+2*time.Second)) {
					t.Fatalf("acts %v, first %v: want no pings and no more relay first", kinds(acts), s.First)
				}
			},
		},
		{
			name:  "relay first: a path port answer from before the way was taken is not one",
			state: func() *State { return New(t0) },
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(RelayFirstAfter))
				ev.Candidates = []Candidate{answering(relayP, relayPath, t0, time.Millisecond)}
				ev.DirectPings = relay.Measure{At: t0.Add(-time.Second), RTT: time.Millisecond}
				return ev
			},
			want: Relay,
		},
		{
			name:  "relay first: a peer we may not ping directly gets pings through the relays only",
			state: func() *State { return New(t0) },
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(10 * time.Millisecond))
				ev.Dialable = false
				ev.Candidates = []Candidate{answering(relayP, relayPath, t0, time.Millisecond)}
				return ev
			},
			want: Direct,
			check: func(t *testing.T, s *State, acts []Action) {
				if !slices.Equal(kinds(acts), []Kind{PingVia}) {
					t.Fatalf("acts %v, want a ping through the candidate only", kinds(acts))
				}
			},
		},
		{
			name: "the peer relays to us: relayed the same way, answered",
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(2 * time.Second))
				ev.Device = Device{Known: true, Endpoint: loopback, Handshake: t0.Add(time.Second)}
				ev.RelayedIn, ev.RelayedVia, ev.RelayedViaKey = true, relayPath, relayP
				return ev
			},
			want: Relay, why: "relay via 198.18.9.0/24: the peer's datagrams come to us through it",
			check: func(t *testing.T, s *State, _ []Action) {
				if !s.Answered || s.RelayAddr != relayPath {
					t.Fatalf("answered %v, relay at %v", s.Answered, s.RelayAddr)
				}
			},
		},
		{
			name: "the peer relays to us while we punch: its NAT dialed again",
			state: func() *State {
				s := New(t0)
				s.Move(Punched, "punched: test", t0)
				return s
			},
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(2 * time.Second))
				ev.Applied.Endpoint = outside
				ev.Device = Device{Known: true, Endpoint: loopback, Handshake: t0.Add(time.Second)}
				ev.RelayedIn, ev.RelayedVia, ev.RelayedViaKey = true, relayPath, relayP
				return ev
			},
			want: Punched,
			check: func(t *testing.T, s *State, acts []Action) {
				if len(acts) == 0 || acts[0].Kind != DialAgain {
					t.Fatalf("acts %v, want DialAgain first", kinds(acts))
				}
			},
		},
		{
			name: "the peer's datagrams come from its NAT while relayed, a tick on: punched",
			state: func() *State {
				s := relayedByP()
				s.RoamedOut = t0.Add(9 * time.Second)
				return s
			},
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(10 * time.Second))
				ev.Device = Device{Known: true, Endpoint: outside, Handshake: t0.Add(9 * time.Second)}
				return ev
			},
			want: Punched, why: "punched: the peer's datagrams come to us from its NAT's address",
		},
		{
			name: "two answers in a row on the path port: back to direct",
			state: func() *State {
				s := relayedByP()
				s.DirectPinged, s.DirectOK = t0.Add(50*time.Second), 1
				return s
			},
			ev: func(*State) *Evidence {
				now := t0.Add(55 * time.Second)
				ev := evidence(now)
				ev.Outside = netip.AddrPort{}
				ev.ViaRelay = relay.Measure{At: now.Add(-time.Second)}
				ev.Candidates = []Candidate{{Key: relayP, Addr: relayPath, M: ev.ViaRelay}}
				ev.DirectPings = relay.Measure{At: now.Add(-4 * time.Second), RTT: time.Millisecond}
				return ev
			},
			want: Direct, why: "direct: answers again",
			check: func(t *testing.T, s *State, _ []Action) {
				if !s.DirectBack || !s.DirectAfter.Equal(t0.Add(55*time.Second+DirectBackoff)) {
					t.Fatalf("back %v, next try after %v", s.DirectBack, s.DirectAfter)
				}
			},
		},
		{
			name: "the clock behind the way's start (evidence older than a move): nothing moves",
			ev: func(*State) *Evidence {
				ev := evidence(t0.Add(-time.Hour))
				ev.Candidates = []Candidate{answering(relayP, relayPath, t0, time.Millisecond)}
				return ev
			},
			want: Direct,
			check: func(t *testing.T, s *State, acts []Action) {
				if _, ok := took(acts); ok {
					t.Fatalf("acts %v: a move on evidence from before the way was taken", kinds(acts))
				}
			},
		},
		{
			name: "the clock an hour on: a way that never answered is left, once",
			ev:   func(*State) *Evidence { return evidence(t0.Add(time.Hour)) },
			want: Punched, why: "no answer for 3600 s",
			check: func(t *testing.T, s *State, acts []Action) {
				n := 0
				for _, k := range kinds(acts) {
					if k == Take {
						n++
					}
				}
				if n != 1 {
					t.Fatalf("acts %v, want one Take", kinds(acts))
				}
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := New(t0)
			s.First = false
			s.FirstRound(t0.Add(time.Second))
			if c.state != nil {
				s = c.state()
			}
			acts := s.Decide(c.ev(s))
			if s.Way != c.want || !strings.Contains(s.Why, c.why) {
				t.Fatalf("way %v (%q), want %v (%q); acts %v", s.Way, s.Why, c.want, c.why, kinds(acts))
			}
			if a, ok := took(acts); ok && a.Way != s.Way {
				t.Fatalf("Take says %v (%q), the state %v (%q)", a.Way, a.Why, s.Way, s.Why)
			}
			if c.check != nil {
				c.check(t, s, acts)
			}
		})
	}
}

// TestPunchAgainSchedule: a relayed peer that publishes its NAT's address is asked
// to punch PunchFirst after it was relayed, then at twice the wait each time up to
// PunchMax; an attempt without an answer says so in the way's why, once; a new NAT
// address of the peer's (PunchSoon) asks at the next decision and starts the waits
// again; with our NAT mapping each destination anew nothing is tried, and the why
// says why.
func TestPunchAgainSchedule(t *testing.T) {
	s := relayedByP()
	ev := evidence(t0)
	ev.Dialable = false
	// attempts decides once a second from..to and returns when each attempt opened,
	// checking that each asks the peer through the relay with our path's address.
	attempts := func(from, to time.Time) []time.Duration {
		var out []time.Duration
		for now := from; !now.After(to); now = now.Add(ChooseEvery) {
			ev.Now = now
			acts := s.Decide(ev)
			if i := slices.IndexFunc(acts, func(a Action) bool { return a.Kind == PunchNow }); i >= 0 {
				if acts[i].Via != relayPath || acts[i].Addr != ourPath {
					t.Fatalf("punch now via %v naming %v, want via %v naming %v", acts[i].Via, acts[i].Addr, relayPath, ourPath)
				}
				out = append(out, now.Sub(t0))
			}
		}
		return out
	}
	got := attempts(t0, t0.Add(3*time.Minute))
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 140 * time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("attempts at %v, want %v (PunchFirst, doubling to PunchMax)", got, want)
	}
	if s.Way != Relay || strings.Count(s.Why, "punched tried") != 1 {
		t.Fatalf("after attempts with no answer: way %v, why %q; want relayed, saying so once", s.Way, s.Why)
	}
	now := t0.Add(3*time.Minute + 500*time.Millisecond)
	s.PunchSoon("the peer publishes a new NAT address (test)", "", now)
	if got := attempts(now, now.Add(6*time.Second)); len(got) != 2 || got[1]-got[0] != PunchFirst {
		t.Fatalf("after a new NAT address: attempts at %v, want one at once and one PunchFirst later", got)
	}
	ev.Maps = "our NAT gives each destination a port of its own (test)"
	later := now.Add(10 * time.Minute)
	if got := attempts(later, later.Add(2*time.Minute)); len(got) != 0 {
		t.Fatalf("with a NAT that maps each destination anew: attempts at %v, want none", got)
	}
	if !strings.Contains(s.Why, "not punched: our NAT gives each destination") || strings.Contains(s.Why, "punched tried") {
		t.Fatalf("why %q: want it to say why it is not punched, and only that", s.Why)
	}
}

// TestPunchWaitsForOutside: an attempt due before anyone told us where our path
// socket is seen from outside is not spent (a "punch now" would name no address):
// it opens at the first decision after we know.
func TestPunchWaitsForOutside(t *testing.T) {
	s := relayedByP()
	ev := evidence(t0)
	ev.Dialable, ev.OurPath = false, netip.AddrPort{}
	for ; ev.Now.Before(t0.Add(20 * time.Second)); ev.Now = ev.Now.Add(ChooseEvery) {
		if acts := s.Decide(ev); slices.Contains(kinds(acts), PunchNow) {
			t.Fatalf("at %v: a punch now without our address", ev.Now.Sub(t0))
		}
	}
	if !s.PunchSince.IsZero() || s.PunchAt.After(ev.Now) {
		t.Fatalf("without our outside address: an attempt opened at %v, next due %v; want none, due at once", s.PunchSince, s.PunchAt)
	}
	ev.OurPathBy = map[netip.Prefix]netip.AddrPort{relayP: ourPath}
	if acts := s.Decide(ev); !slices.Contains(kinds(acts), PunchNow) || !s.PunchSince.Equal(ev.Now) {
		t.Fatalf("once the relay told us our address: acts %v, attempt at %v, want a punch now at %v", kinds(acts), s.PunchSince, ev.Now)
	}
}

// TestPunchAnswered: while both ping, an answer from the peer's path socket at its
// NAT's address moves it to punched, unless a hold is on.
func TestPunchAnswered(t *testing.T) {
	for _, hold := range []bool{false, true} {
		s := relayedByP()
		if hold {
			s.PunchHold = t0.Add(time.Hour)
		}
		ev := evidence(t0.Add(2 * time.Second))
		ev.Dialable = false
		ev.Punch = relay.Punch{Addr: outside, At: t0.Add(time.Second)}
		if acts := s.Decide(ev); !slices.Equal(kinds(acts), []Kind{PunchNow, PingAt}) {
			t.Fatalf("the peer asks: acts %v, want a punch now back and a ping at its NAT", kinds(acts))
		}
		// A decision later: its path socket answered there.
		ev.Now = t0.Add(3 * time.Second)
		ev.AtPunch = relay.Measure{At: t0.Add(2500 * time.Millisecond), RTT: time.Millisecond}
		s.Decide(ev)
		want := Punched
		if hold {
			want = Relay
		}
		if s.Way != want {
			t.Errorf("hold %v: way %v (%q), want %v", hold, s.Way, s.Why, want)
		}
	}
}

// FuzzDecide: any evidence, in any order of times, leaves a state whose way is one
// of the three and whose Take actions say what the state says.
func FuzzDecide(f *testing.F) {
	f.Add(int64(0), int64(8000), int64(1500), true, false, uint8(0))
	f.Add(int64(-3600000), int64(60000), int64(0), false, true, uint8(2))
	f.Fuzz(func(t *testing.T, since, now, rtt int64, outsideOK, relayedIn bool, w uint8) {
		s := New(t0.Add(time.Duration(since) * time.Millisecond))
		s.Move(Way(w%3), "fuzz", s.Since)
		s.Relay, s.RelayAddr = relayP, relayPath
		ev := evidence(t0.Add(time.Duration(now) * time.Millisecond))
		if !outsideOK {
			ev.Outside = netip.AddrPort{}
		}
		ev.Device = Device{Known: relayedIn, Endpoint: loopback, Handshake: t0}
		ev.RelayedIn, ev.RelayedVia, ev.RelayedViaKey = relayedIn, relayPath, relayP
		ev.Candidates = []Candidate{answering(relayQ, relayQAt, t0, time.Duration(rtt))}
		for range 3 {
			acts := s.Decide(ev)
			if s.Way < Direct || s.Way > Relay {
				t.Fatalf("way %d", s.Way)
			}
			if a, ok := took(acts); ok && a.Way != s.Way {
				t.Fatalf("Take to %v, state %v", a.Way, s.Way)
			}
			ev.Now = ev.Now.Add(time.Second)
		}
	})
}

// TestRelayFirstDue: a new peer is due at once (its first pings), then not until
// RelayFirstAfter; an answered or old peer never.
func TestRelayFirstDue(t *testing.T) {
	s := New(t0)
	if !s.RelayFirstDue(t0) {
		t.Fatal("a new peer not due for its first pings")
	}
	// No relay yet: the path port is pinged, and the peer stays due for the relays.
	if acts := s.DecideRelayFirst(evidence(t0)); !slices.Equal(kinds(acts), []Kind{PingDirect}) {
		t.Fatalf("first pings without a relay %v", kinds(acts))
	}
	if !s.RelayFirstDue(t0.Add(250 * time.Millisecond)) {
		t.Fatal("a new peer without a relay pinged not due")
	}
	// A relay now: pinged at once (the path port again a ChooseEvery after its first).
	ev := evidence(t0.Add(10 * time.Millisecond))
	ev.Candidates = []Candidate{answering(relayP, relayPath, t0, time.Millisecond)}
	if acts := s.DecideRelayFirst(ev); !slices.Equal(kinds(acts), []Kind{PingVia}) {
		t.Fatalf("first pings through the relay %v", kinds(acts))
	}
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{{500 * time.Millisecond, false}, {RelayFirstAfter - time.Millisecond, false}, {RelayFirstAfter, true}} {
		if got := s.RelayFirstDue(t0.Add(tc.at)); got != tc.want {
			t.Errorf("due at %v: %v, want %v", tc.at, got, tc.want)
		}
	}
	s.Probed(true, t0.Add(time.Second))
	if s.RelayFirstDue(t0.Add(2 * time.Second)) {
		t.Error("an answered peer due")
	}
	old := relayedByP()
	if old.RelayFirstDue(t0.Add(2 * time.Second)) {
		t.Error("a relayed peer due")
	}
}

// TestRelayFirstFollowsIn: between the chooser's ticks, a new peer whose datagrams
// come to us through a relay is taken that way at once, so GET /peers says so.
func TestRelayFirstFollowsIn(t *testing.T) {
	s := New(t0)
	ev := evidence(t0.Add(RelayFirstAfter))
	ev.Device = Device{Known: true, Endpoint: loopback, Handshake: t0.Add(900 * time.Millisecond)}
	ev.RelayedIn, ev.RelayedVia, ev.RelayedViaKey = true, relayPath, relayP
	acts := s.DecideRelayFirst(ev)
	if !slices.Equal(kinds(acts), []Kind{Take}) || s.Way != Relay || !s.Answered || s.RelayAddr != relayPath || s.RelayFirst.IsZero() {
		t.Fatalf("acts %v; way %v, answered %v, relay %v, relayed first %v", kinds(acts), s.Way, s.Answered, s.RelayAddr, s.RelayFirst)
	}
}

// TestUnprobed: a way without an answer is left at TryNew once the probes judged a
// round on it, else only at ProbedWithin, and then says it was left unprobed.
func TestUnprobed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		judged time.Time
		at     time.Duration
		want   Way
		unprob bool
	}{
		{"probed on the way: left at TryNew", t0.Add(3 * time.Second), TryFor, Punched, false},
		{"never probed: kept at TryNew", time.Time{}, TryFor, Direct, false},
		{"probed before the way was taken: kept", t0.Add(-time.Second), ProbedWithin - time.Second, Direct, false},
		{"never probed: left at ProbedWithin, unprobed", time.Time{}, ProbedWithin, Punched, true},
		{"probed before the way was taken: left at ProbedWithin, unprobed", t0.Add(-time.Second), ProbedWithin, Punched, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(t0)
			s.First = false
			if !tc.judged.IsZero() {
				s.FirstRound(tc.judged)
			}
			acts := s.Decide(evidence(t0.Add(tc.at)))
			if s.Way != tc.want {
				t.Fatalf("way %v, want %v (acts %v)", s.Way, tc.want, kinds(acts))
			}
			a, ok := took(acts)
			if ok != (tc.want != Direct) || a.Unprobed != tc.unprob {
				t.Errorf("took %v (%+v), unprobed %v, want %v", ok, a, a.Unprobed, tc.unprob)
			}
		})
	}
}
