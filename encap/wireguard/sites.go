package wireguard

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/paths/way"
	"github.com/weftnet/weft/transport/relay"
)

// natKeepalive is the PersistentKeepaliveInterval a host with a site gives the peers
// outside its site (unless the Backend sets one): it keeps a NAT's mapping, and so
// the way back, open, if there is a NAT.
const natKeepalive = 25 * time.Second

// The chooser's own timings; the way's are in package way.
const (
	// seenFresh: what a host we said hello to told us counts this long.
	seenFresh = 35 * time.Second
	// maxRelays is how many hosts we say hello to (our relays and reflectors).
	maxRelays = 8
	// chooseEvery is the chooser's tick; helloSoon how often we say hello until a
	// host has told us where it sees our WireGuard.
	chooseEvery = way.ChooseEvery
	helloSoon   = 2 * time.Second
	// relayFirstTick: how often, between the chooser's ticks, new peers are checked
	// for relay first (relayFirstDue): at the chooser's 1 s ticks alone, a peer went
	// to the relay up to 1 s after way.RelayFirstAfter, and the first reply across
	// two NATs came 2.4 s after the start.
	relayFirstTick = 250 * time.Millisecond
)

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
	if ws == nil || confs[0] == nil || ws.Way == way.Direct {
		return confs
	}
	c := *confs[0]
	c.learn = false
	switch ws.Way {
	case way.Punched:
		c.endpoint = l.Attrs.Outside
		if w.keepalive == 0 {
			c.keepalive = natKeepalive
		}
	case way.Relay:
		pk := relay.Key(c.key)
		ep, err := w.node.Endpoint(pk)
		if err != nil {
			w.log.Error("no loopback endpoint for a relayed peer", zap.Stringer("subnet", key), zap.Error(err))
			return confs
		}
		c.endpoint = ep
		w.node.SetRoute(pk, ws.RelayAddr)
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

// moved does what peer key's move to another way (a Take) asks: a relayed way
// gets its route MTU and a hello to our relays soon (a way that failed may mean our
// NAT's mappings changed: the next "punch now" then carries where our path socket
// is seen now); any other loses its relay route. Then the device is configured on
// the way. w.mu is held.
func (w *backend) moved(key netip.Prefix, a way.Action) {
	if a.Changed {
		w.pathChanges++
	}
	if a.Unprobed {
		w.leftUnprobed++
	}
	if a.Way == way.Relay {
		w.helloAt = time.Time{}
	}
	w.relayMTU(w.leases[key].Subnet, a.Way == way.Relay)
	if a.Way != way.Relay {
		if c := w.base[key][0]; c != nil {
			w.node.SetRoute(relay.Key(c.key), netip.AddrPort{})
		}
	}
	w.log.Info("peer path", zap.Stringer("subnet", key), zap.Stringer("way", a.Way), zap.String("why", a.Why))
	w.apply(key, w.onWay(key, w.base[key]), w.log.With(zap.Stringer("subnet", key)))
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
	if ws := w.ways[key]; ws != nil && ws.Way == way.Relay {
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
			return ws != nil && ws.Way == way.Relay
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
	if ws == nil || ws.Way != way.Relay || !l.Attrs.Outside.IsValid() || l.Attrs.Outside == old.Attrs.Outside {
		return
	}
	ws.PunchSoon(fmt.Sprintf("the peer publishes a new NAT address (%v)", l.Attrs.Outside), w.mapsPerDestination, time.Now())
}

// ProbePace is told by the probes how long a new way may wait for its first round.
func (w *backend) ProbePace(firstRound time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.probePace = firstRound
}

// tryNew is how long a new way is given to answer: way.TryFor, or the probes' first
// round and way.TryForSlack where that is longer. w.mu is held.
func (w *backend) tryNew() time.Duration {
	return max(way.TryFor, w.probePace+way.TryForSlack)
}

// PeerState is told by the probes whether a peer answers on the way we took.
func (w *backend) PeerState(subnet netip.Prefix, up bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ws := w.wayOf(subnet); ws != nil {
		ws.Probed(up, time.Now())
	}
}

// FirstRound is told by the probes that they judged their first round on the path
// to a peer: its way has been probed.
func (w *backend) FirstRound(subnet netip.Prefix) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ws := w.wayOf(subnet); ws != nil {
		ws.FirstRound(time.Now())
	}
}

// wayOf is the way of the peer whose IPv4 subnet is subnet (a peer's lease key is
// its IPv4 subnet where it has one), nil if we choose none for it. w.mu is held.
func (w *backend) wayOf(subnet netip.Prefix) *way.State {
	if l, ok := w.leases[subnet]; !ok || l.Subnet != subnet || !subnet.Addr().Is4() {
		return nil
	}
	return w.ways[subnet]
}

// candidates are the hosts we say hello to, which may relay for us and tell us how
// they see us: peers outside our site we reach directly and that answer, dialable at
// their PublicIP on the path port, the lowest subnets first. w.mu is held.
func (w *backend) candidates(status map[wgtypes.Key]peerStatus) []netip.Prefix {
	var out []netip.Prefix
	for key, ws := range w.ways {
		c := w.base[key][0]
		if c == nil || ws.Way != way.Direct || !directAddr(w.leases[key]).Is4() {
			continue
		}
		// Answered: the probes say so, or (sooner, at start) the device handshook
		// with it on this way.
		if ws.Answered || w.handshook(key, ws, status) {
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
	if now.Sub(w.helloAt) >= every {
		w.hello(cands, now)
	} else {
		w.helloNew(cands, now)
	}
	w.learnOutside(now)
	pathBy, path := w.ourPath()
	for key, ws := range w.ways {
		w.step(key, ws, cands, status, pathBy, path, now)
	}
	w.sendPings()
	w.saveWays()
}

// sendPings sends the pings the decisions asked for, together. w.mu is held.
func (w *backend) sendPings() {
	if len(w.pings) == 0 {
		return
	}
	if failed, err := w.node.Pings(w.pings); failed > 0 {
		w.log.Debug("pings not sent", zap.Int("failed", failed), zap.Int("of", len(w.pings)), zap.Error(err))
	}
	clear(w.pings) // no keys kept past the tick
	w.pings = w.pings[:0]
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
// "punch now", and each sees our new address in our lease within seconds and asks
// too (newOutside). w.mu is held.
func (w *backend) punchWithPeers(out netip.AddrPort) {
	now := time.Now()
	for _, ws := range w.ways {
		ws.PunchSoon(fmt.Sprintf("our NAT address is new (%v)", out), w.mapsPerDestination, now)
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

// ourPath is where our path socket is seen from outside our NAT, by each host we
// said hello to (by its lease) and by any of them. w.mu is held.
func (w *backend) ourPath() (map[netip.Prefix]netip.AddrPort, netip.AddrPort) {
	seen := w.node.Seen()
	by := make(map[netip.Prefix]netip.AddrPort, len(seen))
	var byAny netip.AddrPort
	for key, confs := range w.base {
		if c := confs[0]; c != nil {
			if s, ok := seen[relay.Key(c.key)]; ok && s.Relay.IsValid() {
				by[key] = s.Relay
			}
		}
	}
	for _, s := range seen {
		if s.Relay.IsValid() {
			byAny = s.Relay
			break
		}
	}
	return by, byAny
}

// evidence is what peer key's way is decided on now: its lease, the device, the
// path socket's pings and the relays that may carry it. It fills w.ev, one for
// every peer of a tick (Decide keeps none of it). w.mu is held.
func (w *backend) evidence(key netip.Prefix, ws *way.State, cands []netip.Prefix, status map[wgtypes.Key]peerStatus,
	pathBy map[netip.Prefix]netip.AddrPort, path netip.AddrPort, now time.Time) *way.Evidence {
	l, c := w.leases[key], w.base[key][0]
	pk := relay.Key(c.key)
	ev := &w.ev
	*ev = way.Evidence{Now: now, TryNew: w.tryNew(), Maps: w.mapsPerDestination,
		DirectEndpoint: c.endpoint, Dialable: directAddr(l).Is4(), Outside: l.Attrs.Outside,
		OurPathBy: pathBy, OurPath: path, Candidates: ev.Candidates[:0]}
	if st, ok := status[c.key]; ok {
		ev.Device = way.Device{Known: true, Endpoint: st.endpoint, Handshake: st.handshake}
		if k, relayed := w.node.IsEndpoint(st.endpoint); relayed && k == pk {
			ev.RelayedIn, ev.RelayedVia = true, w.node.Route(pk)
			ev.RelayedViaKey = w.relayAt(ev.RelayedVia)
		}
	}
	ev.Applied = applied(w.applied[key][0])
	if ws.Way == way.Direct && ws.Answered && !ws.First {
		// A direct way that answers: the decision reads no pings (the relays' are
		// for the peers that may leave their way).
		return ev
	}
	for _, r := range cands {
		if r != key {
			addr := w.pathAddr(r)
			ev.Candidates = append(ev.Candidates, way.Candidate{Key: r, Addr: addr, M: w.node.Measured(pk, addr)})
		}
	}
	ev.ViaRelay = w.node.Measured(pk, ws.RelayAddr)
	ev.DirectPings = w.node.Measured(pk, netip.AddrPort{})
	ev.Punch = w.node.PunchOf(pk)
	ev.AtPunch = w.node.MeasuredAt(pk, ws.PunchAddr)
	if ev.Punch.Addr.IsValid() {
		ev.AtAsked = w.node.MeasuredAt(pk, ev.Punch.Addr)
	}
	return ev
}

// applied is a configured peer as package way sees it (nil: none).
func applied(a *wgPeerConf) way.Applied {
	if a == nil {
		return way.Applied{}
	}
	return way.Applied{Set: true, Learn: a.learn, Endpoint: a.endpoint}
}

// step decides peer key's way on the evidence and does what the decision asks.
// w.mu is held.
func (w *backend) step(key netip.Prefix, ws *way.State, cands []netip.Prefix, status map[wgtypes.Key]peerStatus,
	pathBy map[netip.Prefix]netip.AddrPort, path netip.AddrPort, now time.Time) {
	if w.base[key][0] == nil {
		return
	}
	w.do(key, ws, ws.Decide(w.evidence(key, ws, cands, status, pathBy, path, now)))
}

// do does what a decision about peer key asks, in order; its pings wait in w.pings
// for sendPings. w.mu is held.
func (w *backend) do(key netip.Prefix, ws *way.State, acts []way.Action) {
	pk := relay.Key(w.base[key][0].key)
	for _, a := range acts {
		var err error
		switch a.Kind {
		case way.Take:
			w.moved(key, a)
		case way.DialAgain:
			w.dialAgain(key)
		case way.NewRelay:
			w.pathChanges++
			w.node.SetRoute(pk, ws.RelayAddr)
			w.log.Info("peer relay", zap.Stringer("subnet", key), zap.Stringer("relay", ws.Relay), zap.Duration("rtt", a.RTT))
		case way.PingVia:
			w.pings = append(w.pings, relay.PingTo{Peer: pk, Via: a.Addr})
		case way.PingDirect:
			w.pings = append(w.pings, relay.PingTo{Peer: pk, Addr: w.pathAddr(key)})
		case way.PingAt:
			w.pings = append(w.pings, relay.PingTo{Peer: pk, Addr: a.Addr, At: true})
		case way.PunchNow:
			err = w.node.PunchNow(pk, a.Via, a.Addr)
		}
		if err != nil {
			w.log.Debug("punch now", zap.Stringer("subnet", key), zap.Error(err))
		}
	}
}

// hello says hello to the candidates cands, at now: they learn where our sockets
// are seen from, and relay for us. w.mu is held.
func (w *backend) hello(cands []netip.Prefix, now time.Time) {
	w.helloAt, w.helloCands = now, len(cands)
	for _, key := range cands {
		if err := w.node.Hello(relay.Key(w.base[key][0].key), w.pathAddr(key)); err != nil {
			w.log.Debug("hello", zap.Stringer("to", key), zap.Error(err))
		}
	}
}

// helloNew says hello at once when the candidates changed: a new peer's first
// packets go through a relay only once both have said hello to it. w.mu is held.
func (w *backend) helloNew(cands []netip.Prefix, now time.Time) {
	if len(cands) != w.helloCands {
		w.hello(cands, now)
	}
}

// relayFirstDue relays first, between the chooser's ticks, the new peers whose first
// way has gone way.RelayFirstAfter without an answer or a handshake, so that their
// first packets do not wait for the next tick. w.mu is held.
func (w *backend) relayFirstDue(now time.Time) {
	var due []netip.Prefix
	for key, ws := range w.ways {
		if ws.RelayFirstDue(now) && w.base[key][0] != nil {
			due = append(due, key)
		}
	}
	if len(due) == 0 {
		return
	}
	status := w.status()
	cands := w.candidates(status)
	if len(cands) == 0 {
		// No relay to go to: nothing to do between the ticks (the chooser's
		// tick pings the path ports). With 5,000 new peers and no relay, each
		// was decided 4 times a second until its first way was left.
		return
	}
	w.helloNew(cands, now)
	pathBy, path := w.ourPath()
	for _, key := range due {
		ws := w.ways[key]
		w.do(key, ws, ws.DecideRelayFirst(w.evidence(key, ws, cands, status, pathBy, path, now)))
	}
	w.sendPings()
}

// handshook reports whether the IPv4 device handshook with peer key on its way
// (way.State.Handshook). w.mu is held.
func (w *backend) handshook(key netip.Prefix, ws *way.State, status map[wgtypes.Key]peerStatus) bool {
	a := w.applied[key][0]
	if a == nil {
		return false
	}
	st, ok := status[a.key]
	return ws.Handshook(way.Device{Known: ok, Endpoint: st.endpoint, Handshake: st.handshake}, applied(a))
}

// relayAt is the lease whose path port is addr. It is asked for every relayed peer
// each tick: a scan of the leases each time cost 0.7 of a core with 5,000 peers.
func (w *backend) relayAt(addr netip.AddrPort) netip.Prefix {
	if w.atPath == nil {
		w.atPath = make(map[netip.AddrPort]netip.Prefix, len(w.leases))
		for key, l := range w.leases {
			if a := directAddr(l); a.IsValid() {
				w.atPath[netip.AddrPortFrom(a, uint16(w.pathPort))] = key
			}
		}
	}
	return w.atPath[addr]
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
		case ws.Way == way.Punched && ws.Answered:
			punched++
		case ws.Way == way.Relay:
			relayed++
		}
	}
	return punched, relayed
}
