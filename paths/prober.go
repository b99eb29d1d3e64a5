package paths

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
)

// tick is how often the Prober looks for rounds to judge and rounds due while rounds
// are seconds apart: ten times a second is precise enough for rounds of seconds and
// keeps an idle prober asleep. With thousands of peers rounds are most of a minute
// apart, and the Prober wakes less often (see step): each wake costs the runtime
// more than the probes it sends.
const tick = 100 * time.Millisecond

// maxStep is the longest time between two wakes of the Prober.
const maxStep = 500 * time.Millisecond

// Once rounds are longer than fullEveryAbove (many peers), the full-size probe goes
// every fullEvery-th round only, while the path MTU is known and fine: it is most of
// the cost of a round, and a path's MTU seldom changes.
const (
	fullEveryAbove = 5 * time.Second
	fullEvery      = 5
)

// Prober probes the paths a backend lists. Run probes until its context ends; Report,
// Summary and Counts may be called at any time.
type Prober struct {
	cfg    Config
	log    *zap.Logger
	lister encap.PathLister
	setter encap.RouteMTUSetter // nil: the backend cannot set a route's MTU
	follow encap.PeerStateFollower
	first  encap.FirstRoundFollower // nil: the backend is not told of first rounds
	pace   encap.ProbePaceFollower  // nil: the backend does not follow the pace
	id     uint16                   // our ICMP echo identifier

	mu       sync.Mutex
	socks    [2]*rawSocket
	sockErr  [2]error
	peers    map[netip.Prefix]*peer
	byID     map[uint32]*peer
	nextID   uint32
	inflight []*peer // rounds in flight, oldest first
	due      dueQueue
	// perRound is the mean of packets a round sends (an average of the last rounds),
	// which plans the period; unsent counts rounds whose probes the kernel had no
	// room for (ENOBUFS): not judged, tried again next period.
	perRound float64
	unsent   uint64
	sent     uint64
	buf      []byte // the send buffer, allocated once
}

// New returns a Prober of the paths lister lists. When lister is also an
// encap.RouteMTUSetter, a path MTU found below the device's is set on the route.
func New(cfg Config, lister encap.PathLister, log *zap.Logger) *Prober {
	pr := &Prober{
		cfg: cfg.withDefaults(), log: log, lister: lister, id: uint16(rand.Uint32()),
		peers: map[netip.Prefix]*peer{}, byID: map[uint32]*peer{}, buf: make([]byte, maxProbeLen),
		perRound: 1.2,
	}
	pr.setter, _ = lister.(encap.RouteMTUSetter)
	pr.follow, _ = lister.(encap.PeerStateFollower)
	pr.first, _ = lister.(encap.FirstRoundFollower)
	pr.pace, _ = lister.(encap.ProbePaceFollower)
	return pr
}

// Sent is how many probe packets have been sent.
func (pr *Prober) Sent() uint64 {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.sent
}

// Run probes until ctx ends, then closes its sockets. Route MTUs it set stay: the
// kernel data path outlives weftd, and the next weftd probes again.
func (pr *Prober) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer func() {
		pr.mu.Lock()
		for _, s := range pr.socks {
			if s != nil {
				s.close()
			}
		}
		pr.mu.Unlock()
		wg.Wait()
	}()
	step := tick
	t := time.NewTicker(step)
	defer t.Stop()
	var refreshed, last time.Time
	var told time.Duration // the pace the backend was told
	tokens := 0.0
	for {
		now := time.Now()
		pr.mu.Lock()
		every, s := pr.refreshEvery(), pr.step()
		pr.mu.Unlock()
		if s != step {
			step = s
			t.Reset(step)
		}
		if now.Sub(refreshed) >= every {
			refreshed = now
			pr.refresh(ctx, now, &wg)
		}
		if pr.pace != nil && every+step != told {
			// A path read at the next refresh is probed at once: its first round
			// comes within every, and a step.
			told = every + step
			pr.pace.ProbePace(told)
		}
		if !last.IsZero() {
			tokens = min(tokens+now.Sub(last).Seconds()*float64(pr.cfg.Rate), float64(pr.cfg.Rate)+8) // a second's burst
		}
		last = now
		pr.judgeDue(ctx, now)
		tokens = pr.sendDue(now, step, tokens)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// refresh takes the backend's paths: new peers are probed, gone ones forgotten (and
// their route MTU given back), changed ones probed afresh. A new path of a family
// whose socket could not be opened is told judged at once (the backend would wait
// for its first round in vain).
func (pr *Prober) refresh(ctx context.Context, now time.Time, wg *sync.WaitGroup) {
	paths := pr.lister.Paths()
	var giveBack, firsts []netip.Prefix
	pr.mu.Lock()
	seen := make(map[netip.Prefix]bool, len(paths))
	for _, path := range paths {
		if !path.Subnet.IsValid() {
			continue
		}
		seen[path.Subnet] = true
		old := pr.peers[path.Subnet]
		if old != nil && samePath(old.path, path) {
			old.path.RouteMTU, old.path.LastHandshake, old.path.Why = path.RouteMTU, path.LastHandshake, path.Why
			continue
		}
		if old != nil {
			pr.forget(old)
			if old.routeMTU > 0 {
				giveBack = append(giveBack, path.Subnet)
			}
		}
		pr.nextID++
		p := newPeer(pr.nextID, path, now)
		pr.peers[path.Subnet], pr.byID[p.id] = p, p
		pr.due.push(p)
		pr.openSocket(p.fam, wg)
		if pr.sockErr[p.fam] != nil {
			// No round will come: the backend waits for none.
			p.judged = true
			firsts = append(firsts, path.Subnet)
		}
	}
	for sn, p := range pr.peers {
		if !seen[sn] {
			pr.forget(p)
			delete(pr.peers, sn)
			if p.routeMTU > 0 {
				giveBack = append(giveBack, sn)
			}
		}
	}
	pr.mu.Unlock()
	for _, sn := range giveBack {
		pr.setRouteMTU(ctx, sn, 0)
	}
	if pr.first != nil {
		for _, sn := range firsts {
			pr.first.FirstRound(sn)
		}
	}
}

// samePath reports whether a and b are the same path to probe.
func samePath(a, b encap.Path) bool {
	return a.PublicIP == b.PublicIP && a.Overlay == b.Overlay && a.Local == b.Local &&
		a.Endpoint == b.Endpoint && a.MTU == b.MTU && a.Backend == b.Backend && a.Via == b.Via && a.Punched == b.Punched
}

// forget drops p's id, so late answers to it are ignored.
func (pr *Prober) forget(p *peer) {
	delete(pr.byID, p.id)
	p.pending = false
}

// openSocket opens the socket of family fam the first time a path needs it, and
// starts reading its answers.
func (pr *Prober) openSocket(fam int, wg *sync.WaitGroup) {
	if pr.socks[fam] != nil || pr.sockErr[fam] != nil {
		return
	}
	s, err := listen(fam)
	if err != nil {
		pr.sockErr[fam] = err
		pr.log.Error("peers cannot be probed", zap.Error(err))
		return
	}
	pr.socks[fam] = s
	wg.Add(1)
	go func() {
		defer wg.Done()
		pr.receive(s)
	}()
}

// period is the time between two rounds to a peer: Interval, or longer when the
// rate does not allow that many probes.
// The period is planned on planShare of the rate: rounds planned at the whole of it
// would queue behind each other at the least burst and fall ever further behind.
// pr.mu is held.
func (pr *Prober) period() time.Duration {
	const planShare = 0.9
	need := time.Duration(float64(len(pr.peers)) * pr.perRound / (planShare * float64(pr.cfg.Rate)) * float64(time.Second))
	return max(pr.cfg.Interval, min(need, maxPeriod))
}

// maxPeriod is the longest planned time between two rounds to a peer: every peer is
// probed within a minute. When the rate cannot carry that many rounds, they fall
// behind instead (weft_probe_packets_sent_total then stays at the rate).
const maxPeriod = 55 * time.Second

// step is the time between two wakes of the Prober: a tick while rounds are seconds
// apart, up to maxStep when they are most of a minute apart (a fiftieth of the
// period). A round due within a step is sent at once, and a round is judged up to a
// step after its Timeout. pr.mu is held.
func (pr *Prober) step() time.Duration {
	return max(tick, min(pr.period()/50, maxStep))
}

// refreshEvery is how often the backend's paths are read again: every Interval for a
// few peers, less often for thousands (a new peer waits at most 10 s for its first
// round; its lease took longer to come). pr.mu is held.
func (pr *Prober) refreshEvery() time.Duration {
	return max(pr.cfg.Interval, min(pr.period()/4, 10*time.Second))
}

// Unsent is how many rounds could not be sent for want of room in the kernel.
func (pr *Prober) Unsent() uint64 {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.unsent
}

// sendDue sends the rounds that are due before the next wake (within step), as far
// as tokens (packets) allow; it returns the tokens left.
func (pr *Prober) sendDue(now time.Time, step time.Duration, tokens float64) float64 {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	period := pr.period()
	for tokens >= 1 {
		p := pr.due.peek()
		if p == nil || now.Add(step).Before(p.next) {
			break
		}
		pr.due.pop()
		if pr.byID[p.id] != p {
			continue // forgotten
		}
		// Spread: the first rounds of many new peers do not stay in step.
		p.next = now.Add(period - time.Duration(rand.Int64N(int64(period/10)+1)))
		pr.due.push(p)
		s := pr.socks[p.fam]
		if s == nil || p.pending {
			continue
		}
		n, sent := pr.sendRound(s, p, now, period)
		tokens -= float64(n)
		if p.round > 1 { // a first round checks the MTU too: not what rounds cost later
			pr.perRound += (float64(n) - pr.perRound) / 64
		}
		if !sent {
			p.pending = false
			pr.unsent++
			continue
		}
		pr.inflight = append(pr.inflight, p)
	}
	return tokens
}

// sendRound sends p's probes of a new round: the small one through the tunnel; the
// full-size one while the tunnel answers (every round, or with long periods every
// fullEvery-th while the MTU is fine); the public address's while the tunnel is
// silent (every third round once the peer is down and its reason known). It returns
// how many it sent, and false when the kernel had no room for the main one (the
// round is then not judged).
func (pr *Prober) sendRound(s *rawSocket, p *peer, now time.Time, period time.Duration) (int, bool) {
	p.round++
	p.sent, p.pending, p.got, p.sendErr = now, true, answers{}, nil
	n := 0
	send := func(kind byte, size int, src, dst netip.Addr) error {
		size = max(size, minProbe(p.fam))
		m := putEcho(pr.buf, p.fam, pr.id, probe{peer: p.id, kind: kind, round: p.round, size: uint16(size), sent: now}, size)
		n++
		pr.sent++
		return s.send(m, src, dst)
	}
	if p.tunneled() {
		p.sendErr = send(kindTunnel, smallProbe, p.path.Local, p.path.Overlay)
		if noRoom(p.sendErr) {
			return n, false
		}
		// With many peers the MTU of a path is checked in one round of fullEvery,
		// each peer's turn offset by its id (so the rounds after a start do not all
		// check it at once), and in every round while it is in doubt.
		doubt := p.fullLost > 0 || p.routeMTU > 0
		switch {
		case p.sendErr != nil || p.lost > 0:
		case p.search != nil:
			for _, v := range p.search.sizes {
				_ = send(kindSearch, v, p.path.Local, p.path.Overlay)
				_ = send(kindSearch, v, p.path.Local, p.path.Overlay)
			}
		case p.path.MTU > 0 && (period <= fullEveryAbove || doubt || (uint32(p.round)+p.id)%fullEvery == 0):
			p.got.fullSent = true
			_ = send(kindFull, p.path.MTU, p.path.Local, p.path.Overlay)
		}
	}
	if !p.tunneled() || p.sendErr != nil || p.lost > 0 && (p.state != StateDown || p.lost%3 == 0) {
		p.got.underlaySent = true
		err := send(kindUnderlay, smallProbe, netip.Addr{}, p.path.PublicIP)
		if !p.tunneled() {
			if noRoom(err) {
				return n, false
			}
			p.sendErr = err
		}
	}
	return n, true
}

// receive records the answers s reads until it is closed.
func (pr *Prober) receive(s *rawSocket) {
	b := make([]byte, maxProbeLen)
	for {
		n, from, err := s.recv(b, time.Time{})
		if err != nil {
			if isClosed(err) {
				return
			}
			continue
		}
		id, data, err := parseEchoReply(b[:n], s.fam)
		if err != nil || id != pr.id {
			continue
		}
		pb, err := parseProbe(data)
		if err != nil {
			continue
		}
		pr.answer(pb, from, time.Now())
	}
}

// answer records one answer to a probe of the round in flight.
func (pr *Prober) answer(pb probe, from netip.Addr, now time.Time) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	p := pr.byID[pb.peer]
	if p == nil || !p.pending || p.round != pb.round {
		return
	}
	want := p.path.Overlay
	if pb.kind == kindUnderlay {
		want = p.path.PublicIP
	}
	if from != want {
		return
	}
	switch pb.kind {
	case kindTunnel:
		p.got.tunnel, p.got.rtt = true, now.Sub(p.sent)
	case kindFull:
		p.got.full = true
	case kindSearch:
		p.got.sizes = append(p.got.sizes, int(pb.size))
	case kindUnderlay:
		p.got.underlay = true
		if !p.tunneled() {
			p.got.rtt = now.Sub(p.sent)
		}
	}
}

// change is a peer's move from one state to another, logged after the lock.
type change struct {
	before, after Peer
}

// judgeDue judges the rounds whose answers had their time.
func (pr *Prober) judgeDue(ctx context.Context, now time.Time) {
	type routeSet struct {
		sn  netip.Prefix
		mtu int
	}
	var sets []routeSet
	var changes []change
	var rtts []time.Duration
	var firsts []netip.Prefix // paths whose first round this is
	pr.mu.Lock()
	i := 0
	for ; i < len(pr.inflight); i++ {
		p := pr.inflight[i]
		if now.Sub(p.sent) < pr.cfg.Timeout {
			break
		}
		if !p.pending || pr.byID[p.id] != p {
			continue
		}
		p.pending = false
		before := p.view()
		if p.got.tunnel {
			rtts = append(rtts, p.got.rtt)
		}
		if mtu, changed := p.judge(now); changed {
			sets = append(sets, routeSet{p.path.Subnet, mtu})
		}
		if !p.judged {
			p.judged = true
			firsts = append(firsts, p.path.Subnet)
		}
		if after := p.view(); after.State != before.State || after.Reason != before.Reason {
			changes = append(changes, change{before, after})
		}
	}
	pr.inflight = append(pr.inflight[:0], pr.inflight[i:]...)
	pr.mu.Unlock()
	for _, s := range sets {
		pr.setRouteMTU(ctx, s.sn, s.mtu)
	}
	if pr.first != nil {
		for _, sn := range firsts {
			pr.first.FirstRound(sn)
		}
	}
	for _, c := range changes {
		pr.logChange(c)
		pr.tell(c)
	}
	if pr.cfg.ObserveRTT != nil {
		for _, d := range rtts {
			pr.cfg.ObserveRTT(d)
		}
	}
}

// setRouteMTU asks the backend to set the MTU of the route to sn (0: give it back).
func (pr *Prober) setRouteMTU(_ context.Context, sn netip.Prefix, mtu int) {
	if pr.setter == nil {
		return
	}
	if err := pr.setter.SetRouteMTU(sn, mtu); err != nil {
		pr.log.Error("cannot set the route MTU of a peer's subnet", zap.Stringer("peer-subnet", sn),
			zap.Int("mtu", mtu), zap.Error(err))
		return
	}
	if mtu > 0 {
		pr.log.Info("lowered the route MTU to a peer's subnet to its path MTU", zap.Stringer("peer-subnet", sn), zap.Int("mtu", mtu))
	} else {
		pr.log.Info("gave the route to a peer's subnet its device's MTU again", zap.Stringer("peer-subnet", sn))
	}
}

// tell tells the backend when a peer comes up (from down, or found answering for
// the first time on a new path) or goes down: a backend that chooses among paths
// learns from it whether the one it took answers.
func (pr *Prober) tell(c change) {
	if pr.follow == nil {
		return
	}
	sn, err := netip.ParsePrefix(c.after.Subnet)
	if err != nil {
		return
	}
	answers := func(s string) bool { return s == StateUp || s == StateDegraded }
	switch {
	case c.after.State == StateDown && c.before.State != StateDown:
		pr.follow.PeerState(sn, false)
	case answers(c.after.State) && !answers(c.before.State):
		pr.follow.PeerState(sn, true)
	}
}

// logChange logs a peer's move: at Info when it goes to or comes from a bad state,
// at Debug when a new peer is found up (thousands at start).
func (pr *Prober) logChange(c change) {
	fields := []zap.Field{zap.String("peer-subnet", c.after.Subnet), zap.String("peer", c.after.PublicIP),
		zap.String("from", c.before.State), zap.String("state", c.after.State)}
	if c.after.Reason != "" {
		fields = append(fields, zap.String("reason", c.after.Reason), zap.String("detail", c.after.Detail))
	}
	if c.before.State == StateUnknown && c.after.State == StateUp {
		pr.log.Debug("peer reachable", fields...)
		return
	}
	pr.log.Info("peer path state changed", fields...)
}

// Report is every peer as probed, sorted by subnet (IPv4 first).
func (pr *Prober) Report() Report {
	pr.mu.Lock()
	r := Report{Peers: make([]Peer, 0, len(pr.peers))}
	keys := make([]netip.Prefix, 0, len(pr.peers))
	for sn := range pr.peers {
		keys = append(keys, sn)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Addr().Less(keys[j].Addr()) })
	for _, sn := range keys {
		v := pr.peers[sn].view()
		if err := pr.sockErr[pr.peers[sn].fam]; err != nil && v.State == StateUnknown {
			v.Detail = "cannot probe: " + err.Error()
		}
		r.Peers = append(r.Peers, v)
	}
	pr.mu.Unlock()
	return r
}
