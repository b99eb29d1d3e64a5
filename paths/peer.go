package paths

import (
	"fmt"
	"math/bits"
	"net/netip"
	"time"

	"github.com/weftnet/weft/encap"
)

// downAfter is how many rounds in a row must lose the tunnel probe before a peer is
// down: one lost packet is never trusted.
const downAfter = 3

// fullLostAfter is how many rounds in a row must pass the small probe and lose the
// full-size one before the path MTU is searched; fullOKAfter how many must pass the
// full-size probe before a lowered route MTU is given back.
const (
	fullLostAfter = 2
	fullOKAfter   = 2
)

// lossWindow is how many recent tunnel probes the loss is measured over, and
// lossDegraded the loss from which an answering peer is degraded.
const (
	lossWindow   = 16
	lossDegraded = 0.5
)

// smallProbe is the IP packet size of the small probes.
const smallProbe = 64

// peer is one peer subnet's path and what its rounds found. The Prober's mutex
// guards it.
type peer struct {
	id   uint32
	path encap.Path
	fam  int

	// The round in flight: sent at sent, answers recorded in got.
	round   uint16
	sent    time.Time
	pending bool
	next    time.Time // when the next round is due
	sendErr error     // why a probe of the round could not be sent
	got     answers

	// What the rounds found.
	lost, fullLost, fullOK int
	history                uint32 // tunnel probes, newest in bit 0: 1 lost
	samples                int
	judged                 bool // a round was judged on this path
	rtt                    time.Duration
	// underlay holds the answers to the last probes of the public address, newest in
	// bit 0: 1 answered.
	underlay          uint32
	search            *mtuSearch
	pathMTU, routeMTU int

	state, reason, detail string
	since                 time.Time
}

// answers are the answers a round got.
type answers struct {
	tunnel, full, underlay bool
	fullSent, underlaySent bool
	rtt                    time.Duration
	sizes                  []int // sizes of an MTU search answered
}

func newPeer(id uint32, p encap.Path, now time.Time) *peer {
	fam := 0
	if p.Subnet.Addr().Is6() {
		fam = 1
	}
	return &peer{id: id, path: p, fam: fam, state: StateUnknown, since: now, routeMTU: p.RouteMTU}
}

// tunneled reports whether the path has a tunnel to probe through (host-gw has none:
// its probe is the public address's).
func (p *peer) tunneled() bool { return p.path.Overlay.IsValid() && p.path.Local.IsValid() }

// loss is the share of the recent tunnel probes that were lost.
func (p *peer) loss() float64 {
	n := min(p.samples, lossWindow)
	if n == 0 {
		return 0
	}
	return float64(bits.OnesCount32(p.history&(1<<n-1))) / float64(n)
}

// judge takes the answers of the round just ended and updates what the peer is. It
// returns the route MTU the peer's subnet should now have and whether that changed.
func (p *peer) judge(now time.Time) (routeMTU int, changed bool) {
	g := p.got
	if g.underlaySent {
		p.underlay <<= 1
		if g.underlay {
			p.underlay |= 1
		}
	}
	ok := g.tunnel
	if !p.tunneled() {
		ok = g.underlay
	}
	p.history <<= 1
	p.samples++
	if !ok {
		p.history |= 1
		p.lost++
		p.fullOK, p.fullLost = 0, 0
		if p.lost >= downAfter {
			p.set(now, StateDown, p.downReason())
		}
		return p.routeMTU, false
	}
	if p.state == StateDown {
		// Back: the loss is measured from now, not over the rounds it was down.
		p.history, p.samples = 0, 1
	}
	p.lost, p.underlay = 0, 0 // the host's answers count within a streak of losses
	p.rtt = g.rtt
	before := p.routeMTU
	if p.tunneled() && p.path.MTU > 0 {
		p.judgeMTU(now)
	}
	switch {
	case p.routeMTU > 0:
		p.set(now, StateDegraded, p.mtuReason())
	case p.samples >= lossWindow/4 && p.loss() >= lossDegraded:
		p.set(now, StateDegraded, [2]string{ReasonLoss, fmt.Sprintf(
			"%.0f%% of the last %d probes through the tunnel to %v were lost: check the links and the load between the hosts",
			100*p.loss(), min(p.samples, lossWindow), p.path.PublicIP)})
	default:
		p.set(now, StateUp, [2]string{})
	}
	return p.routeMTU, p.routeMTU != before
}

// judgeMTU follows the full-size probes: a search when they keep failing, the route
// MTU given back when they keep passing.
func (p *peer) judgeMTU(now time.Time) {
	g := p.got
	if p.search != nil {
		if found, done := p.search.took(g.sizes); done {
			p.search, p.pathMTU = nil, found
			if found < p.path.MTU {
				p.routeMTU = found
			}
		}
		return
	}
	if !g.fullSent {
		return // the MTU was not checked this round
	}
	if g.full {
		p.fullOK++
		p.fullLost = 0
		if p.fullOK >= fullOKAfter || p.routeMTU == 0 {
			p.pathMTU, p.routeMTU = p.path.MTU, 0
		}
		return
	}
	p.fullOK = 0
	p.fullLost++
	if p.fullLost >= fullLostAfter && p.routeMTU == 0 {
		p.search = newSearch(smallProbe, p.path.MTU)
	}
}

// set moves the peer to state with reason and detail (r), noting since when.
func (p *peer) set(now time.Time, state string, r [2]string) {
	if p.state != state || p.reason != r[0] {
		p.since = now
	}
	p.state, p.reason, p.detail = state, r[0], r[1]
}

// downReason names why the tunnel is silent from what the rounds saw.
func (p *peer) downReason() [2]string {
	pub, rounds := p.path.PublicIP, p.lost
	if p.sendErr != nil {
		return [2]string{ReasonNoRoute, fmt.Sprintf(
			"probes to %v cannot leave this host (%v): check this host's routes to %v", p.target(), p.sendErr, p.path.Subnet)}
	}
	if !p.tunneled() {
		return [2]string{ReasonUnderlay, fmt.Sprintf(
			"%v has not answered ping for %d rounds: check that the host is up and on this host's L2 segment (host-gw routes to it directly)",
			pub, rounds)}
	}
	if p.underlay&(1<<downAfter-1) != 0 { // one of the last probes of the host answered
		return [2]string{ReasonEncap, fmt.Sprintf(
			"%v answers ping, but nothing has come back through the tunnel (%s to %v) for %d rounds: check that %s is allowed both ways between the hosts (security groups, host firewalls, NSX) and that the peer has a route back to our subnet",
			pub, p.path.Proto, p.path.Endpoint, rounds, p.path.Proto)}
	}
	return [2]string{ReasonUnderlay, fmt.Sprintf(
		"%v does not answer ping, and nothing has come back through the tunnel (%s) for %d rounds: check that the host is up and reachable from this host's interface; if ICMP is filtered on the underlay, check %s too",
		pub, p.path.Proto, rounds, p.path.Proto)}
}

// mtuReason says what the path MTU is and what weft did about it.
func (p *peer) mtuReason() [2]string {
	return [2]string{ReasonPathMTU, fmt.Sprintf(
		"packets of up to %d bytes pass through the tunnel to %v, %d-byte ones do not, and no ICMP says why: the route to %v has MTU %d now, so pods get \"fragmentation needed\"; check the MTU of the links between the hosts",
		p.pathMTU, p.path.PublicIP, p.path.MTU, p.path.Subnet, p.routeMTU)}
}

// target is where the round's main probe goes.
func (p *peer) target() netip.Addr {
	if p.tunneled() {
		return p.path.Overlay
	}
	return p.path.PublicIP
}

// view is the peer as GET /peers shows it.
func (p *peer) view() Peer {
	v := Peer{
		Subnet: p.path.Subnet.String(), PublicIP: p.path.PublicIP.String(), Backend: p.path.Backend,
		State: p.state, Reason: p.reason, Detail: p.detail, Loss: p.loss(),
		PathMTU: p.pathMTU, RouteMTU: p.routeMTU, Path: "direct", Since: p.since.UTC(),
	}
	switch {
	case p.path.Via.IsValid():
		v.Path = "relay via " + p.path.Via.String()
	case p.path.Punched:
		v.Path = "punched"
	}
	v.PathDetail = p.path.Why
	if !p.path.LastHandshake.IsZero() {
		v.LastHandshake = p.path.LastHandshake.UTC().Format(time.RFC3339)
	}
	if p.state == StateUp || p.state == StateDegraded {
		v.RTTMicros = max(p.rtt.Microseconds(), 1)
	}
	if p.path.Endpoint.IsValid() {
		v.Endpoint = p.path.Endpoint.String()
	} else if p.path.PublicIP.IsValid() {
		v.Endpoint = p.path.PublicIP.String()
	}
	return v
}
