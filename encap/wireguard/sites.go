package wireguard

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/transport/relay"
)

// natKeepalive is the PersistentKeepaliveInterval a host with a site gives the peers
// outside its site (unless the Backend sets one): it keeps a NAT's mapping, and so
// the way back, open, if there is a NAT.
const natKeepalive = 25 * time.Second

// way is how we reach a peer outside our site. A host with a site takes them in this
// order, each on the evidence that the one before gives no answer; without a site
// every peer is direct, as in flanneld.
type way int

const (
	wayDirect  way = iota // its published address: PublicIP (a peer that says never dial it dials us)
	wayPunched            // its NAT's outside address (lease Outside), both of us dialing together
	wayRelay              // through a relay that forwards its datagrams as they are
)

func (v way) String() string { return [...]string{"direct", "punched", "relay"}[v] }

// The timings of the choice.
const (
	// tryFor: a way the probes have not found answering within this is left for
	// the next (the probes' rounds are 2 s apart); longer where the probes read the
	// paths more slowly (ProbePace, on thousands of peers): their first round plus
	// tryForSlack.
	tryFor      = 8 * time.Second
	tryForSlack = 3 * time.Second
	// directEvery: while another way is used, the direct way is pinged on the path
	// port this often; directAnswers answers in a row move the peer back to it.
	directEvery   = 5 * time.Second
	directAnswers = 2
	// directBackoff: after a move back to direct that brought no answer, the next
	// waits this long.
	directBackoff = 30 * time.Second
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
	// seenFresh: what a host we said hello to told us counts this long.
	seenFresh = 35 * time.Second
	// maxRelays is how many hosts we say hello to (our relays and reflectors).
	maxRelays = 8
	// chooseEvery is the chooser's tick; helloSoon how often we say hello until a
	// host has told us where it sees our WireGuard.
	chooseEvery = time.Second
	helloSoon   = 2 * time.Second
	// A relayed peer that publishes its NAT's address is asked to punch again
	// ("punch now" through the relay) punchFirst after it was relayed, then at
	// twice the wait each time up to punchMax; for punchWindow after a punch (ours
	// or the peer's) both ping each other's path socket at its NAT's address, and
	// the first answer moves the peer to punched. WireGuard stays on the relay until
	// the path port answered, so an attempt that gets no answer costs pings only;
	// one whose path port answers while WireGuard's port cannot pass (two hosts
	// behind one NAT on the same inside ports) costs up to tryFor of traffic.
	punchFirst  = 5 * time.Second
	punchMax    = 60 * time.Second
	punchWindow = 6 * time.Second
	// punchHoldMax: after punched ways in a row that WireGuard found silent (each
	// costs up to tryFor of traffic), the next move waits punchFirst doubled per
	// failure, up to this.
	punchHoldMax = 10 * time.Minute
	// relayFirstAfter: a new peer whose first way (direct; a way kept over a
	// restart is trusted for tryFor instead) has neither handshaken nor answered
	// the probes this long is relayed at once where a relay answers for it, and the
	// first way is tried beside the relay on the path port: pinged every chooseEvery
	// for relayFirstFast, then every directEvery. It was tryFor (8 s) per way before
	// the first packet moved.
	relayFirstAfter = 1500 * time.Millisecond
	relayFirstFast  = 10 * time.Second
	// relayFirstTick: how often, between the chooser's ticks, new peers are checked
	// for relay first (relayFirstDue): at the chooser's 1 s ticks alone, a peer went
	// to the relay up to 1 s after relayFirstAfter, and the first reply across two
	// NATs came 2.4 s after the start.
	relayFirstTick = 250 * time.Millisecond
	// punchAfterRelayFirst: a peer relayed first that publishes its NAT's address is
	// asked to punch ("punch now") this long after, not punchFirst: the first
	// punch then comes within seconds of the start. (An attempt through WireGuard
	// alone still follows tryFor after the first way, punchAfterFirst, if the path
	// port gave no answer by then.)
	punchAfterRelayFirst = time.Second
)

// wayState is how we reach one peer outside our site, and the evidence for it.
type wayState struct {
	way      way
	since    time.Time // when this way was taken
	answered bool      // the probes found the peer answering since
	upAt     time.Time // when the probes last found it answering
	downAt   time.Time // when the probes last found it down
	why      string    // why this way, for GET /peers
	// The relay of wayRelay: its lease's key and its path port.
	relay     netip.Prefix
	relayAddr netip.AddrPort
	measured  time.Time // pings sent through the relays
	// Pings on the direct way while another is used.
	directPinged time.Time
	directOK     int
	directAfter  time.Time
	// directBack: this direct way was taken on the path port's answers.
	directBack bool
	// Punching again while relayed: the next "punch now" is due at punchAt, the
	// wait after it is punchWait; punchSeen is the peer's last punch we took;
	// while punchUntil, its path socket at punchAddr is pinged since punchSince.
	punchAt, punchSeen     time.Time
	punchWait              time.Duration
	punchUntil, punchSince time.Time
	punchAddr              netip.AddrPort
	// roamedOut: while relayed, when the device first had the peer's NAT address
	// as its endpoint (the peer's datagrams came from there).
	roamedOut time.Time
	// first: the peer is on its first way since its lease came (relayFirst may
	// apply); relayFirst: it was relayed first, and since when; firstSince: when
	// its first way was taken (the punched attempt comes tryFor after it, as
	// without relay first).
	first      bool
	relayFirst time.Time
	firstSince time.Time
	// punchHold: after a punched way the path port's answers chose got no answer
	// through WireGuard, no move on such answers before this (the path socket's NAT
	// mapping held where WireGuard's did not: another host behind the same NAT took
	// WireGuard's port toward this peer).
	punchHold  time.Time
	punchFails int // punched ways in a row that got no answer through WireGuard
}

// chooses reports whether we choose a way for peer l by evidence: we have a site (the
// path port open) and l is outside it. w.mu is held.
func (w *backend) chooses(l lease.Lease) bool {
	own := w.own.Attrs
	return own.Site != "" && w.node != nil && !w.noChoice && !(l.Attrs.Site == own.Site && l.Attrs.SiteIP.IsValid())
}

// bySite adjusts confs, lease l's peer on each device, to sites: a peer of our site is
// dialed at its SiteIP; a peer that says it is never to be dialed (NAT) dials us (its
// endpoint is the one WireGuard learns), unless we choose its way; a host with a site
// keeps a NAT's mapping open toward peers outside it.
func (w *backend) bySite(l lease.Lease, confs [2]*wgPeerConf) {
	own := w.own.Attrs
	sameSite := own.Site != "" && l.Attrs.Site == own.Site && l.Attrs.SiteIP.IsValid()
	for _, c := range confs {
		if c == nil {
			continue
		}
		switch {
		case sameSite:
			if c.endpoint.Addr().Is4() == l.Attrs.SiteIP.Is4() {
				c.endpoint = netip.AddrPortFrom(l.Attrs.SiteIP, c.endpoint.Port())
			}
		case l.Attrs.NAT:
			c.learn = true
		}
		if own.Site != "" && !sameSite && w.keepalive == 0 {
			c.keepalive = natKeepalive
		}
	}
}

// onWay is confs, peer key's own configuration, on the way ws says: the IPv4 device's
// endpoint is the peer's NAT outside (punched) or our loopback socket for it
// (relayed). w.mu is held.
func (w *backend) onWay(key netip.Prefix, confs [2]*wgPeerConf) [2]*wgPeerConf {
	ws, l := w.ways[key], w.leases[key]
	if ws == nil || confs[0] == nil || ws.way == wayDirect {
		return confs
	}
	c := *confs[0]
	c.learn = false
	switch ws.way {
	case wayPunched:
		c.endpoint = l.Attrs.Outside
		if w.keepalive == 0 {
			c.keepalive = natKeepalive
		}
	case wayRelay:
		pk := relay.Key(c.key)
		ep, err := w.node.Endpoint(pk)
		if err != nil {
			w.log.Error("no loopback endpoint for a relayed peer", zap.Stringer("subnet", key), zap.Error(err))
			return confs
		}
		c.endpoint = ep
		w.node.SetRoute(pk, ws.relayAddr)
	}
	confs[0] = &c
	return confs
}

// directAddr is where peer l is dialed directly: its PublicIP (invalid when it says
// it is never to be dialed, or has none).
func directAddr(l lease.Lease) netip.Addr {
	if l.Attrs.NAT || !l.Attrs.PublicIP.IsValid() || l.Attrs.PublicIP.IsUnspecified() {
		return netip.Addr{}
	}
	return l.Attrs.PublicIP
}

// take moves peer key to way v, saying why, and configures the device. w.mu is held.
func (w *backend) take(key netip.Prefix, v way, why string, now time.Time) {
	w.setWay(key, v, why, now)
	w.apply(key, w.onWay(key, w.base[key]), w.log.With(zap.Stringer("subnet", key)))
}

// setWay moves peer key to way v, saying why; the caller configures the device.
// w.mu is held.
func (w *backend) setWay(key netip.Prefix, v way, why string, now time.Time) {
	ws := w.ways[key]
	if ws.way != v {
		w.pathChanges++
	}
	ws.way, ws.since, ws.answered, ws.why, ws.directBack = v, now, false, why, false
	ws.roamedOut = time.Time{}
	ws.punchUntil, ws.first, ws.relayFirst, ws.firstSince = time.Time{}, false, time.Time{}, time.Time{}
	if v == wayRelay {
		ws.punchAt = now.Add(max(ws.punchWait, punchFirst)) // punchAgain's next try
		// A way that failed may mean our NAT's mappings changed: hello again at the
		// next tick, so the "punch now" carries where our path socket is seen now.
		w.helloAt = time.Time{}
	}
	w.relayMTU(w.leases[key].Subnet, v == wayRelay)
	if v != wayRelay {
		ws.relay, ws.relayAddr = netip.Prefix{}, netip.AddrPort{}
		if c := w.base[key][0]; c != nil {
			w.node.SetRoute(relay.Key(c.key), netip.AddrPort{})
		}
	}
	w.log.Info("peer path", zap.Stringer("subnet", key), zap.Stringer("way", v), zap.String("why", why))
}

// relayMTU gives a peer's IPv4 subnet sn a route MTU on the IPv4 device that leaves
// room for the relay frame (relay.MaxOverhead) while the peer is relayed (on), and
// takes it off when it is not: without it a full-size packet's relayed datagram is
// larger than the underlay's MTU and goes in two IP fragments, and TCP through a relay
// moved nothing (0.00 Gbit/s in weft-bench sites; full-size pings passed). A lower
// route MTU path repair set stays. w.mu is held.
func (w *backend) relayMTU(sn netip.Prefix, on bool) {
	d := w.devs[0]
	if d == nil || !sn.IsValid() || !sn.Addr().Is4() || sn.Bits() == 0 {
		return
	}
	want, cur := w.relayedMTU(), w.mtus.Get(sn)
	mtu := 0
	switch {
	case on && (cur == 0 || cur > want):
		mtu = want
	case !on && cur == want:
	default:
		return
	}
	link, err := d.Link()
	if err == nil {
		err = w.mtus.SetOn(link.Attrs().Index, sn, mtu)
	}
	if err != nil {
		w.log.Warn("route MTU for a relayed peer", zap.Stringer("subnet", sn), zap.Int("mtu", mtu), zap.Error(err))
	}
}

// forgetWay drops peer key's way (its lease, old, gone or no longer chosen), and the
// route MTU a relayed way gave its subnet. w.mu is held.
func (w *backend) forgetWay(key netip.Prefix, old lease.Lease) {
	if ws := w.ways[key]; ws != nil && ws.way == wayRelay {
		w.relayMTU(old.Subnet, false)
	}
	delete(w.ways, key)
}

// relayedMTU is the MTU of a relayed peer's route: the device's less the relay frame.
func (w *backend) relayedMTU() int { return w.MTU() - relay.MaxOverhead }

// relayed reports whether the peer whose IPv4 subnet is sn is relayed. w.mu is held.
func (w *backend) relayed(sn netip.Prefix) bool {
	for key, l := range w.leases {
		if l.Subnet == sn {
			ws := w.ways[key]
			return ws != nil && ws.way == wayRelay
		}
	}
	return false
}

// dialAgain configures peer key's endpoint again as we applied it: the device roamed
// away from it. w.mu is held.
func (w *backend) dialAgain(key netip.Prefix) {
	c := w.applied[key][0]
	if c == nil || c.learn || w.devs[0] == nil {
		return
	}
	if err := w.devs[0].Configure(wgtypes.Config{Peers: []wgtypes.PeerConfig{w.peerConfig(c)}}); err != nil {
		w.log.Warn("dialing the peer's NAT again", zap.Stringer("subnet", key), zap.Error(err))
	}
}

// newOutside is what a peer's lease publishing a new NAT address does to its way: a
// relayed peer tries punching there (the address may have come after the direct way
// failed, or changed with a new NAT mapping). w.mu is held.
func (w *backend) newOutside(key netip.Prefix, old, l lease.Lease) {
	ws := w.ways[key]
	if ws == nil || ws.way != wayRelay || !l.Attrs.Outside.IsValid() || l.Attrs.Outside == old.Attrs.Outside {
		return
	}
	w.punchSoon(ws, fmt.Sprintf("the peer publishes a new NAT address (%v)", l.Attrs.Outside))
}

// punchSoon has relayed peer ws try punching at the next tick (punchAgain, beside
// the relay), for the reason why; with our NAT mapping each destination anew it
// cannot work, and the peer's way says so instead. w.mu is held.
func (w *backend) punchSoon(ws *wayState, why string) {
	if !ws.firstSince.IsZero() {
		return // relayed first: punchAfterFirst tries the punched way at its old moment
	}
	if w.mapsPerDestination != "" {
		ws.why = notPunched(ws.why, why+"; not punched: "+w.mapsPerDestination)
		return
	}
	ws.punchAt, ws.punchWait = time.Now(), 0
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

// ProbePace is told by the probes how long a new way may wait for its first round.
func (w *backend) ProbePace(firstRound time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.probePace = firstRound
}

// tryNew is how long a new way is given to answer: tryFor, or the probes' first
// round and tryForSlack where that is longer. w.mu is held.
func (w *backend) tryNew() time.Duration {
	return max(tryFor, w.probePace+tryForSlack)
}

// PeerState is told by the probes whether a peer answers on the way we took.
func (w *backend) PeerState(subnet netip.Prefix, up bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, l := range w.leases {
		if l.Subnet != subnet && l.IPv6Subnet != subnet {
			continue
		}
		ws := w.ways[key]
		if ws == nil || subnet.Addr().Is6() {
			return
		}
		if up {
			ws.answered, ws.upAt = true, time.Now()
		} else {
			ws.answered, ws.downAt = false, time.Now()
		}
		return
	}
}

// candidates are the hosts we say hello to, which may relay for us and tell us how
// they see us: peers outside our site we reach directly and that answer, dialable at
// their PublicIP on the path port, the lowest subnets first. w.mu is held.
func (w *backend) candidates(status map[wgtypes.Key]peerStatus) []netip.Prefix {
	var out []netip.Prefix
	for key, ws := range w.ways {
		c := w.base[key][0]
		if c == nil || ws.way != wayDirect || !directAddr(w.leases[key]).Is4() {
			continue
		}
		// Answered: the probes say so, or (sooner, at start) the device handshook
		// with it on this way.
		if ws.answered || w.handshook(key, ws, status) {
			out = append(out, key)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	if len(out) > maxRelays {
		out = out[:maxRelays]
	}
	return out
}

// pathAddr is peer key's path port.
func (w *backend) pathAddr(key netip.Prefix) netip.AddrPort {
	return netip.AddrPortFrom(directAddr(w.leases[key]), uint16(w.pathPort))
}

// choose is one tick of the choice: hellos to the candidates, our NAT's outside
// address from their answers, and each peer's way moved on evidence. w.mu is held.
func (w *backend) choose(now time.Time) {
	status := w.status()
	w.keepSeen(status, now)
	cands := w.candidates(status)
	every := relay.HelloEvery
	if !w.seenWG(now) {
		every = helloSoon // until a host has told us where it sees our WireGuard
	}
	if now.Sub(w.helloAt) >= every || len(cands) != w.helloCands {
		w.helloAt, w.helloCands = now, len(cands)
		for _, key := range cands {
			if err := w.node.Hello(relay.Key(w.base[key][0].key), w.pathAddr(key)); err != nil {
				w.log.Debug("hello", zap.Stringer("to", key), zap.Error(err))
			}
		}
	}
	w.learnOutside(now)
	for key, ws := range w.ways {
		w.step(key, ws, cands, status, now)
	}
	w.saveWays()
}

// seenWG reports whether a host we said hello to told us lately where it sees our
// WireGuard socket. w.mu is held.
func (w *backend) seenWG(now time.Time) bool {
	for _, s := range w.node.Seen() {
		if now.Sub(s.At) < seenFresh && s.WireGuard.IsValid() {
			return true
		}
	}
	return false
}

// learnOutside reads what the candidates see of our WireGuard socket: one address
// and port is our NAT's outside (published when it is not our own); different ports
// for different hosts mean a NAT that maps each destination anew. w.mu is held.
func (w *backend) learnOutside(now time.Time) {
	type view struct {
		by  netip.Prefix
		see netip.AddrPort
	}
	var views []view
	byKey := map[relay.Key]netip.Prefix{}
	for key, confs := range w.base {
		if confs[0] != nil {
			byKey[relay.Key(confs[0].key)] = key
		}
	}
	for k, s := range w.node.Seen() {
		if key, ok := byKey[k]; ok && now.Sub(s.At) < seenFresh && s.WireGuard.IsValid() {
			views = append(views, view{key, s.WireGuard})
		}
	}
	if len(views) == 0 {
		return
	}
	slices.SortFunc(views, func(a, b view) int { return a.by.Addr().Compare(b.by.Addr()) })
	out := views[0].see
	w.mapsPerDestination = ""
	for _, v := range views[1:] {
		if v.see != out {
			w.mapsPerDestination = fmt.Sprintf("our NAT gives each destination a port of its own (%v seen by %v, %v by %v)",
				out, views[0].by, v.see, v.by)
		}
	}
	if out == netip.AddrPortFrom(w.ext.PublicIP, uint16(w.opts.ListenPort)) {
		out = netip.AddrPort{} // no NAT on the way
	}
	if out != w.outside {
		w.log.Info("our WireGuard socket as the hosts we say hello to see it", zap.Stringer("outside", out),
			zap.String("nat", w.mapsPerDestination))
		w.outside = out
		if out.IsValid() {
			w.punchWithPeers(out)
		}
	}
}

// punchWithPeers has every relayed peer try punching again at the next tick, our
// own NAT address being new (out): each that publishes a NAT address is asked with
// "punch now" (punchAgain), and each sees our new address in our lease within
// seconds and asks too (newOutside). w.mu is held.
func (w *backend) punchWithPeers(out netip.AddrPort) {
	for _, ws := range w.ways {
		if ws.way == wayRelay {
			w.punchSoon(ws, fmt.Sprintf("our NAT address is new (%v)", out))
		}
	}
}

// status is what the IPv4 device knows of its peers now (nil when it cannot say).
// w.mu is held.
func (w *backend) status() map[wgtypes.Key]peerStatus {
	if w.devs[0] == nil {
		return nil
	}
	st, err := w.devs[0].Peers()
	if err != nil {
		return nil
	}
	return st
}

// step moves peer key's way on the evidence. w.mu is held.
func (w *backend) step(key netip.Prefix, ws *wayState, cands []netip.Prefix, status map[wgtypes.Key]peerStatus, now time.Time) {
	l, c := w.leases[key], w.base[key][0]
	if c == nil {
		return
	}
	pk := relay.Key(c.key)
	// The peer relays to us: its datagrams come through a relay, and our device took
	// our loopback socket as its endpoint. Take that way too, and say so; but while we
	// punch (the peer may have moved to punching a moment after us, its last relayed
	// datagrams still on their way), dial its NAT again instead, for tryNew; and
	// after a move back to direct on the path port's answers, dial it directly again
	// for peerCatchUp, the time its own pings there take to move it too.
	if st, ok := status[c.key]; ok && ws.way != wayRelay {
		k, relayed := w.node.IsEndpoint(st.endpoint)
		// Answered or not: the probes cross the tunnel whichever way it goes, and
		// find it up through the relay the device roamed back to.
		punching := ws.way == wayPunched && now.Sub(ws.since) < w.tryNew()
		catchingUp := ws.way == wayDirect && ws.directBack && now.Sub(ws.since) < peerCatchUp
		if relayed && k == pk && (punching || catchingUp) {
			w.dialAgain(key)
		} else if relayed && k == pk {
			via := w.node.Route(pk)
			ws.relay, ws.relayAddr = w.relayAt(via), via
			why := fmt.Sprintf("relay via %v: the peer's datagrams come to us through it", ws.relay)
			if ws.why != "" {
				why += "; before: " + ws.why
			}
			first := ws.first
			w.take(key, wayRelay, why, now)
			ws.answered = true
			if first {
				ws.relayFirst = now // the peer relayed first: try its first way as fast
			}
			return
		}
	}
	// The peer reaches us from its NAT's address while we relay (it dials our NAT: it
	// punched, or kept the punched way over its restart): our device roamed there on
	// its authenticated datagrams, and our answers go back through the mapping they
	// came by. Still so a tick later: punched is the way; say so.
	if st, ok := status[c.key]; ok && ws.way == wayRelay && l.Attrs.Outside.IsValid() && st.endpoint == l.Attrs.Outside {
		if ws.roamedOut.IsZero() {
			ws.roamedOut = now
		} else if now.Sub(ws.roamedOut) >= chooseEvery {
			w.take(key, wayPunched, fmt.Sprintf("punched: the peer's datagrams come to us from its NAT's address (%v)", l.Attrs.Outside), now)
			return
		}
	} else {
		ws.roamedOut = time.Time{}
	}
	if ws.first && (ws.way == wayDirect || ws.way == wayPunched) {
		if w.relayFirstStep(key, ws, pk, cands, status, now) {
			return
		}
	}
	// A handshake on this way's endpoint since it was taken is an answer: the
	// probes, which visit each peer at most every 10 s on a large cluster, need not
	// come first (tryFor would leave a working way they had not reached yet).
	if !ws.answered && w.handshook(key, ws, status) {
		ws.answered, ws.upAt = true, now
	}
	// A new way is given tryFor: the probes call it down after a few silent rounds,
	// sooner than a punched pair's two sides both dial. One that answered on this way
	// and then is found down is left at once.
	foundDown := ws.downAt.After(ws.since) && ws.upAt.After(ws.since) && ws.downAt.After(ws.upAt)
	failed := !ws.answered && (now.Sub(ws.since) >= w.tryNew() || foundDown)
	if failed {
		lost := fmt.Sprintf("no answer for %d s", int(now.Sub(ws.since).Seconds()))
		if ws.downAt.After(ws.since) {
			lost = "the probes found it down"
		}
		switch ws.way {
		case wayDirect:
			// Pinged on the path port from now on; a failed move back keeps its
			// directBackoff.
			ws.directAfter = later(ws.directAfter, now)
			if l.Attrs.Outside.IsValid() && l.Attrs.Outside != c.endpoint {
				w.take(key, wayPunched, fmt.Sprintf("punched: direct (%v) gave %s; both dial each other's NAT", c.endpoint, lost), now)
				return
			}
			w.take(key, wayRelay, fmt.Sprintf("relay: direct (%v) gave %s and the peer publishes no NAT address to punch", c.endpoint, lost), now)
		case wayPunched:
			ep := l.Attrs.Outside
			if a := w.applied[key][0]; a != nil {
				ep = a.endpoint // the address we punched at
			}
			why := fmt.Sprintf("relay: punched (%v) gave %s", ep, lost)
			if w.mapsPerDestination != "" {
				why += "; " + w.mapsPerDestination
			}
			// A punched way that never answered: path answers are not trusted again
			// for punching this peer for a hold that doubles with each such failure
			// in a row. One that answered and then died (a NAT lost its mappings, a
			// link failed) worked: no hold, the schedule starts again.
			neverAnswered := !ws.upAt.After(ws.since)
			w.take(key, wayRelay, why, now)
			if neverAnswered {
				ws.punchFails++
				ws.punchHold = now.Add(min(punchFirst<<min(ws.punchFails, 16), punchHoldMax))
				ws.punchAt = later(ws.punchAt, ws.punchHold)
			} else {
				ws.punchFails, ws.punchHold = 0, time.Time{}
			}
		}
	}
	if ws.way == wayPunched && ws.answered {
		ws.punchWait, ws.punchFails = 0, 0 // a punch that held: the next relayed spell starts again at punchFirst
	}
	if ws.way == wayRelay {
		w.measureRelays(key, ws, pk, cands, now)
		if w.punchAfterFirst(key, ws, now) || w.punchAgain(key, ws, pk, now) {
			return
		}
	}
	every := directEvery
	if !ws.relayFirst.IsZero() && now.Sub(ws.relayFirst) < relayFirstFast {
		every = chooseEvery
	}
	if ws.way != wayDirect && directAddr(l).Is4() && !now.Before(ws.directAfter) && now.Sub(ws.directPinged) >= every {
		m := w.node.Measured(pk, netip.AddrPort{})
		if !ws.directPinged.IsZero() && m.At.After(ws.directPinged) {
			ws.directOK++
		} else {
			ws.directOK = 0
		}
		if ws.directOK >= directAnswers {
			ws.directOK, ws.directPinged = 0, time.Time{}
			ws.directAfter = now.Add(directBackoff) // if it fails again, not before this
			w.take(key, wayDirect, fmt.Sprintf("direct: answers again (%d pings on the path port in a row)", directAnswers), now)
			ws.directBack = true
			return
		}
		ws.directPinged = now
		_ = w.node.Ping(pk, netip.AddrPort{}, w.pathAddr(key))
	}
}

// punchAgain tries punching with relayed peer key again, on the schedule and when
// the peer asks, by pinging its path socket at its NAT's address while it pings
// ours; an answer moves the peer to punched. It reports whether it moved it. Only a
// peer that publishes its NAT's address is tried, and only while our NAT maps one
// port for every destination (else the peer's pings could not find ours; the way's
// why says so). w.mu is held.
func (w *backend) punchAgain(key netip.Prefix, ws *wayState, pk relay.Key, now time.Time) bool {
	l := w.leases[key]
	if !l.Attrs.Outside.IsValid() || !ws.relayAddr.IsValid() {
		return false
	}
	if w.mapsPerDestination != "" {
		if !strings.Contains(ws.why, "; not punched") {
			ws.why = notPunched(ws.why, "not punched: "+w.mapsPerDestination)
		}
		return false
	}
	if ws.punchAt.IsZero() {
		ws.punchAt = now.Add(punchFirst)
	}
	ours := w.pathOutside(ws.relay)
	if !ours.IsValid() && !now.Before(ws.punchAt) {
		// Not yet told where our path socket is seen from outside: a "punch now"
		// would name no address. Try at the next tick rather than lose the attempt.
		ws.punchAt = now.Add(chooseEvery)
	}
	ask := false
	if p := w.node.PunchOf(pk); p.At.After(ws.punchSeen) && p.Addr.IsValid() {
		// The peer asks: ping it there; outside an attempt of ours, answer with
		// where it finds ours.
		ws.punchSeen, ws.punchAddr = p.At, p.Addr
		if !now.Before(ws.punchUntil) {
			ask, ws.punchSince = true, now
		}
		ws.punchUntil = now.Add(punchWindow)
	}
	if !now.Before(ws.punchAt) {
		ask = true
		ws.punchWait = min(max(2*ws.punchWait, punchFirst), punchMax)
		ws.punchAt = now.Add(ws.punchWait)
		ws.punchUntil, ws.punchSince = now.Add(punchWindow), now
	}
	if ask {
		if ours.IsValid() {
			if err := w.node.PunchNow(pk, ws.relayAddr, ours); err != nil {
				w.log.Debug("punch now", zap.Stringer("subnet", key), zap.Error(err))
			}
		}
	}
	if !ws.punchUntil.IsZero() && !now.Before(ws.punchUntil) {
		ws.punchUntil = time.Time{}
		word := "punched tried on the path port: no answer from the peer's NAT"
		if ws.punchAddr.IsValid() {
			word = fmt.Sprintf("punched tried on the path port at %v: no answer", ws.punchAddr)
		}
		ws.why = notPunched(ws.why, word)
	}
	if ws.punchUntil.IsZero() || !ws.punchAddr.IsValid() {
		return false
	}
	if m := w.node.MeasuredAt(pk, ws.punchAddr); m.At.After(ws.punchSince) && !now.Before(ws.punchHold) {
		ws.punchUntil = time.Time{}
		w.take(key, wayPunched, fmt.Sprintf("punched: the peer's path port answered at its NAT's address (%v, %v) while both pinged; both dial each other's NAT",
			ws.punchAddr, m.RTT.Round(10*time.Microsecond)), now)
		return true
	}
	_ = w.node.PingAt(pk, ws.punchAddr)
	return false
}

// pathOutside is where our path socket is seen from outside our NAT: by the relay
// of lease key if it told us, else by any host we said hello to. w.mu is held.
func (w *backend) pathOutside(relayKey netip.Prefix) netip.AddrPort {
	seen := w.node.Seen()
	if c := w.base[relayKey][0]; c != nil {
		if s, ok := seen[relay.Key(c.key)]; ok && s.Relay.IsValid() {
			return s.Relay
		}
	}
	for _, s := range seen {
		if s.Relay.IsValid() {
			return s.Relay
		}
	}
	return netip.AddrPort{}
}

// relayFirstStep relays peer key at once while its first way has not answered, once
// a relay answers for it: pings go through every candidate from the start, and after
// relayFirstAfter without a handshake or an answer on the first way the peer moves
// to the relay with the shortest round trip. The first way is tried beside it: the
// direct way by pings on the path port (fast for relayFirstFast), the punched way
// by "punch now" at once. It reports whether it moved the peer. w.mu is held.
func (w *backend) relayFirstStep(key netip.Prefix, ws *wayState, pk relay.Key, cands []netip.Prefix, status map[wgtypes.Key]peerStatus, now time.Time) bool {
	if ws.answered {
		ws.first = false
		return false
	}
	if w.handshook(key, ws, status) {
		return false // the way works; the probes will say so
	}
	// Every tick, not every measureEvery: the first relay's answer is what the
	// first packet waits for.
	if now.Sub(ws.measured) >= chooseEvery {
		ws.measured = now
		for _, r := range cands {
			if r != key {
				_ = w.node.Ping(pk, w.pathAddr(r), netip.AddrPort{})
			}
		}
	}
	if now.Sub(ws.since) < relayFirstAfter {
		return false
	}
	best := w.bestRelay(key, pk, cands, now)
	if best == nil {
		return false
	}
	from, ep := ws.way, netip.AddrPort{}
	if a := w.applied[key][0]; a != nil {
		ep = a.endpoint
	}
	w.setWay(key, wayRelay, fmt.Sprintf("relay via %v: first, while %s (%v) has not answered in %d ms; tried beside it",
		best.key, from, ep, now.Sub(ws.since).Milliseconds()), now)
	since := ws.since
	ws.relay, ws.relayAddr, ws.relayFirst, ws.firstSince = best.key, best.addr, now, since
	w.apply(key, w.onWay(key, w.base[key]), w.log.With(zap.Stringer("subnet", key)))
	// Punch soon, through the relay: both sides ping each other's path port at its
	// NAT's address, and the first answer moves WireGuard there.
	ws.punchAt = now.Add(punchAfterRelayFirst)
	return true
}

// relayFirstDue relays first, between the chooser's ticks, the new peers whose first
// way has gone relayFirstAfter without an answer or a handshake (relayFirstStep),
// so that their first packets do not wait for the next tick. w.mu is held.
func (w *backend) relayFirstDue(now time.Time) {
	var due []netip.Prefix
	for key, ws := range w.ways {
		if ws.first && !ws.answered && (ws.way == wayDirect || ws.way == wayPunched) &&
			now.Sub(ws.since) >= relayFirstAfter && w.base[key][0] != nil {
			due = append(due, key)
		}
	}
	if len(due) == 0 {
		return
	}
	status := w.status()
	cands := w.candidates(status)
	for _, key := range due {
		w.relayFirstStep(key, w.ways[key], relay.Key(w.base[key][0].key), cands, status, now)
	}
}

// punchAfterFirst moves a peer relayed first to its punched way tryFor after its
// first way was taken, as without relay first, when it publishes a NAT address and
// we have not punched it since. It reports whether it moved it. w.mu is held.
func (w *backend) punchAfterFirst(key netip.Prefix, ws *wayState, now time.Time) bool {
	l := w.leases[key]
	if ws.firstSince.IsZero() || now.Before(ws.firstSince.Add(w.tryNew())) || !l.Attrs.Outside.IsValid() {
		return false
	}
	ws.firstSince = time.Time{}
	if w.mapsPerDestination != "" {
		ws.why = notPunched(ws.why, "not punched: "+w.mapsPerDestination)
		return false
	}
	w.take(key, wayPunched, fmt.Sprintf("punched: relayed first, direct gave no answer for %d s; both dial each other's NAT (%v)",
		int(w.tryNew().Seconds()), l.Attrs.Outside), now)
	return true
}

// handshook reports whether the IPv4 device handshook with peer key since its way
// was taken and since the probes last found it down, at the endpoint that way
// configured (a handshake through the relay while we punch, the device roaming to
// it, is not the punched way's). w.mu is held.
func (w *backend) handshook(key netip.Prefix, ws *wayState, status map[wgtypes.Key]peerStatus) bool {
	a := w.applied[key][0]
	if a == nil || a.learn || !a.endpoint.IsValid() {
		return false
	}
	st, ok := status[a.key]
	return ok && st.handshake.After(later(ws.since, ws.downAt)) && st.endpoint == a.endpoint
}

// relayOption is a relay for a peer and the round trip through it.
type relayOption struct {
	key  netip.Prefix
	addr netip.AddrPort
	rtt  time.Duration
}

// bestRelay is the candidate with the shortest round trip to peer key whose pings
// answered lately, nil when none. w.mu is held.
func (w *backend) bestRelay(key netip.Prefix, pk relay.Key, cands []netip.Prefix, now time.Time) *relayOption {
	var best *relayOption
	for _, r := range cands {
		if r == key {
			continue
		}
		addr := w.pathAddr(r)
		m := w.node.Measured(pk, addr)
		if now.Sub(m.At) < relayStale && m.NoPeer.Before(m.At) && (best == nil || m.RTT < best.rtt) {
			best = &relayOption{r, addr, m.RTT}
		}
	}
	return best
}

// measureRelays pings peer key through every candidate and keeps, or changes, its
// relay: the one with the shortest round trip through it, until it stops answering.
// w.mu is held.
func (w *backend) measureRelays(key netip.Prefix, ws *wayState, pk relay.Key, cands []netip.Prefix, now time.Time) {
	best := w.bestRelay(key, pk, cands, now)
	cur := w.node.Measured(pk, ws.relayAddr)
	curOK := ws.relayAddr.IsValid() && slices.Contains(cands, ws.relay) &&
		(now.Sub(cur.At) < relayStale || now.Sub(ws.since) < relayStale) && !cur.NoPeer.After(cur.At)
	switch {
	case curOK:
	case best != nil:
		why := fmt.Sprintf("relay via %v: the shortest round trip through a relay (%v)", best.key, best.rtt.Round(10*time.Microsecond))
		if ws.relay.IsValid() {
			why = fmt.Sprintf("relay via %v: %v stopped answering; the shortest round trip now (%v)", best.key, ws.relay, best.rtt.Round(10*time.Microsecond))
		} else if ws.why != "" {
			why += "; " + ws.why
		}
		ws.relay, ws.relayAddr = best.key, best.addr
		w.pathChanges++
		ws.why = why
		w.node.SetRoute(pk, best.addr)
		w.log.Info("peer relay", zap.Stringer("subnet", key), zap.Stringer("relay", best.key), zap.Duration("rtt", best.rtt))
	}
	if now.Sub(ws.measured) >= measureEvery {
		ws.measured = now
		for _, r := range cands {
			if r != key {
				_ = w.node.Ping(pk, w.pathAddr(r), netip.AddrPort{})
			}
		}
	}
}

// relayAt is the lease whose path port is addr.
func (w *backend) relayAt(addr netip.AddrPort) netip.Prefix {
	for key, l := range w.leases {
		if directAddr(l).IsValid() && netip.AddrPortFrom(directAddr(l), uint16(w.pathPort)) == addr {
			return key
		}
	}
	return netip.Prefix{}
}

// Outside is our WireGuard socket's outside address and port, as the hosts we say
// hello to see it (invalid: none seen, or our own: no NAT).
func (w *backend) Outside() netip.AddrPort {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.outside
}

// countWays counts the peers on each way, for the report.
func (w *backend) countWays() (punched, relayed int) {
	for _, ws := range w.ways {
		switch {
		case ws.way == wayPunched && ws.answered:
			punched++
		case ws.way == wayRelay:
			relayed++
		}
	}
	return punched, relayed
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
