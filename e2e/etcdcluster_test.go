package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
)

// Timing of TestEtcdCluster. weftd renews its lease renewMargin before expiry: with
// the largest margin flanneld's flag takes, 1439 of the 1440 minutes of a lease,
// that is a minute after each write. Each failover is set off just before a renewal
// is due, so that weftd has to write while a member is gone.
const (
	renewMarginFlag = "--subnet-lease-renew-margin=1439"
	renewMargin     = 1439 * time.Minute
	renewEvery      = 24*time.Hour - renewMargin
	// killAhead is how long before a renewal is due the member is killed.
	killAhead = 300 * time.Millisecond
	// stagger is how much later than a and c host b starts (and so renews): room for
	// the first failover to end before the second begins.
	stagger = 8 * time.Second
)

// TestEtcdCluster: weftd on three hosts, given the client URLs of a three-member
// etcd cluster (one member on each host), rides out kill -9 of the leader (while the
// renewals of two hosts are due) and, the old leader back, kill -9 of a follower
// (while the third host's renewal is due). Pings between pods on every pair of hosts
// run throughout and lose nothing, while fake leases come and go; no lease is lost or
// changes hands; every host renews after the failovers; and a host that joins
// afterwards is reachable from every pod, so every watch went on. vxlan over plain
// http, udp over TLS with client certificates.
func TestEtcdCluster(t *testing.T) {
	for _, tc := range []struct {
		name, backend string
		tls           bool
	}{
		// Each case waits about a minute for a renewal to come due, so they run in
		// parallel; go test runs GOMAXPROCS of them at once (2 on a small CI machine),
		// so there are two: each backend once, and TLS once.
		{"vxlan", "vxlan", false},
		{"udp-tls", "udp", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testEtcdCluster(t, tc.backend, tc.tls)
		})
	}
}

func testEtcdCluster(t *testing.T, backend string, useTLS bool) {
	l := labtest.New(t, lab.Spec{Prefix: "wq", EtcdCluster: true, EtcdTLS: useTLS,
		Hosts: []lab.HostSpec{{Name: "a", LAN: lab.LAN1}, {Name: "b", LAN: lab.LAN1}, {Name: "c", LAN: lab.LAN2}}})
	testenv.NeedTools(t, "ping", "ss")
	c := &cluster{t: t, lab: l, router: l.Router(), api: "v3", bin: weftd(t)}
	ctx := context.Background()
	// Real hosts lease below 198.18.200.0, where the fake leases are.
	cfg := fmt.Sprintf(`{"Network":%q,"SubnetLen":24,"SubnetMax":"198.18.199.0","Backend":{"Type":%q}}`, lab.Overlay, backend)
	if err := l.SetConfig(ctx, prefix, cfg); err != nil {
		t.Fatal(err)
	}
	ec := newEtcdCtl(t, l)
	hosts := map[string]*host{}
	for _, lh := range l.Hosts() {
		hosts[lh.Name] = &host{name: lh.Name, ns: lh.NS, ip: lh.Addr.String(), lh: lh}
	}
	a, b, cc := hosts["a"], hosts["b"], hosts["c"]
	pods := map[string]string{}
	envs := map[string]lease.SubnetEnv{}
	up := func(h *host) {
		c.start(h, renewMarginFlag)
		envs[h.name] = c.waitSubnetEnv(h)
		h.pod, pods[h.name] = c.cniPod(h)
	}
	up(a)
	up(cc)
	// b starts stagger after a and c, so that its renewal comes due after the first
	// failover is over: a point in time to reach, not a condition.
	time.Sleep(time.Until(leaseDue(t, a).Add(stagger - renewEvery)))
	up(b)
	meshPing(c, hosts, pods, "a", "b", "c")

	// From here on, every change to a lease is recorded.
	w := ec.watchLeases(t)
	own := map[netip.Prefix]*host{}
	for _, h := range []*host{a, b, cc} {
		own[envs[h.name].Subnet] = h
	}

	var pings []*runPinger
	for _, p := range [][2]*host{{a, b}, {b, a}, {b, cc}, {cc, b}, {cc, a}, {a, cc}} {
		pings = append(pings, startRunPinger(t, p[0], p[1].name, pods[p[1].name]))
	}
	start := time.Now()
	churn := ec.churn(t, backend)

	// Failover 1: kill -9 the leader just before a's and c's renewals are due.
	due := leaseDue(t, a)
	if d := leaseDue(t, cc); d.Before(due) {
		due = d
	}
	time.Sleep(time.Until(due.Add(-killAhead)))
	leader := ec.leader(t, -1)
	before := renewals(t, a, b, cc)
	killed := time.Now()
	kill1 := killed
	l.EtcdMembers()[leader].Server.Kill()
	t.Logf("killed the leader, member %s", l.EtcdMembers()[leader].Server.Name())
	newLeader, leaderSeen := ec.awaitLeader(t, leader, killed)
	written := awaitRenewals(t, before, killed, a, cc)
	if err := l.EtcdMembers()[leader].Server.Restart(ctx); err != nil {
		t.Fatalf("restart member %d: %v", leader, err)
	}
	ec.awaitMembers(t)
	awaitReconnect(t, l.EtcdMembers()[leader].Host.Addr, a, b, cc)
	fo1 := failover{leaderSeen: leaderSeen, written: written}
	t.Logf("leader failover: member %d killed, member %d leads after %v; renewals %v after the kill",
		leader, newLeader, leaderSeen.Round(time.Millisecond), written)

	// Failover 2: kill -9 a follower (quorum holds: the old leader is back) just
	// before b's renewal is due.
	follower := -1
	for i := range l.EtcdMembers() {
		if i != newLeader && i != leader {
			follower = i
		}
	}
	if time.Until(leaseDue(t, b)) < killAhead {
		t.Fatalf("the first failover outlasted the stagger of %v: b's renewal is past", stagger)
	}
	time.Sleep(time.Until(leaseDue(t, b).Add(-killAhead)))
	before = renewals(t, a, b, cc)
	killed = time.Now()
	kill2 := killed
	l.EtcdMembers()[follower].Server.Kill()
	_, leaderSeen = ec.awaitLeader(t, follower, killed)
	written = awaitRenewals(t, before, killed, b)
	if err := l.EtcdMembers()[follower].Server.Restart(ctx); err != nil {
		t.Fatalf("restart member %d: %v", follower, err)
	}
	ec.awaitMembers(t)
	awaitReconnect(t, l.EtcdMembers()[follower].Host.Addr, a, b, cc)
	fo2 := failover{leaderSeen: leaderSeen, written: written}
	t.Logf("follower failover: member %d killed, a leader seen after %v; renewals %v after the kill",
		follower, leaderSeen.Round(time.Millisecond), written)

	churned := churn.stop(t)
	var lost, sent int
	for _, p := range pings {
		tx, rx := p.stop(t)
		sent += tx
		lost += tx - rx
		if tx == 0 || rx != tx {
			var when []string
			for _, at := range p.lostAt {
				when = append(when, at.Sub(start).Round(time.Millisecond).String())
			}
			t.Errorf("ping %s -> %s across the failovers: %d sent, %d received; lost ones sent at %v after the pings began (leader killed at %v, follower at %v)",
				p.from, p.to, tx, rx, when, kill1.Sub(start).Round(time.Millisecond), kill2.Sub(start).Round(time.Millisecond))
			t.Logf("lost: %v", p.lostSeq)
			if backend == "udp" {
				for _, h := range []*host{a, b, cc} {
					t.Logf("%s: weft_udp_dropped_packets_total %v", h.name, mustScrape(t, h)["weft_udp_dropped_packets_total"])
				}
			}
		}
	}

	// The watches went on: a host that joins now is reachable from every pod.
	d := c.addHost("d", "lan2")
	c.start(d)
	envs["d"] = c.waitSubnetEnv(d)
	d.pod, pods["d"] = c.cniPod(d)
	hosts["d"] = d
	meshPing(c, hosts, pods, "a", "b", "c", "d")

	// No lease was lost or taken over, and each is good for a day again.
	w.check(t, ec, own)
	for s, h := range own {
		ttl := ec.ttl(t, s)
		if ttl < 24*time.Hour-time.Minute-5*time.Second {
			t.Errorf("%s: lease %v has %v left, want it renewed within the last minute", h.name, s, ttl)
		}
		if strings.Contains(h.logs(), "our lease is gone") {
			t.Errorf("%s: weftd lost its lease:\n%s", h.name, h.logs())
		}
		if v := mustScrape(t, h).must(t, "weft_etcd_reachable"); v != 1 {
			t.Errorf("%s: weft_etcd_reachable %v", h.name, v)
		}
		if err := healthy(h); err != nil {
			t.Errorf("%s: %v", h.name, err)
		}
	}
	scheme := "http"
	if useTLS {
		scheme = "https"
	}
	t.Logf("FIGURES %s over %s, 3 members: pings lost %d of %d; fake lease writes %d; "+
		"kill -9 leader: new leader seen after %.2f s, weftd's next write after %s; "+
		"kill -9 follower: leader seen after %.2f s, weftd's next write after %s",
		backend, scheme, lost, sent, churned,
		fo1.leaderSeen.Seconds(), fo1.writes(), fo2.leaderSeen.Seconds(), fo2.writes())
}

// failover is what one member's kill cost: when a leader was seen, and when each
// host whose renewal was due wrote it, both from the kill.
type failover struct {
	leaderSeen time.Duration
	written    map[string]time.Duration
}

func (f failover) writes() string {
	var parts []string
	for _, n := range []string{"a", "b", "c"} {
		if d, ok := f.written[n]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f s", n, d.Seconds()))
		}
	}
	return strings.Join(parts, ", ")
}

// leaseDue is when weftd on h renews next: renewMargin before its lease runs out.
func leaseDue(t *testing.T, h *host) time.Time {
	t.Helper()
	exp := mustScrape(t, h).must(t, "weft_lease_expiry_timestamp_seconds")
	return time.Unix(0, int64(exp*1e9)).Add(-renewMargin)
}

// renewals reads weft_lease_renewals_total of every host.
func renewals(t *testing.T, hs ...*host) map[*host]float64 {
	t.Helper()
	out := map[*host]float64{}
	for _, h := range hs {
		out[h] = mustScrape(t, h).must(t, "weft_lease_renewals_total")
	}
	return out
}

// awaitRenewals waits until weftd on each of hs has renewed since before, and returns
// how long after since each did.
func awaitRenewals(t *testing.T, before map[*host]float64, since time.Time, hs ...*host) map[string]time.Duration {
	t.Helper()
	out := map[string]time.Duration{}
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < len(hs) {
		for _, h := range hs {
			if _, done := out[h.name]; done {
				continue
			}
			sc, err := scrapeMetrics(h)
			if err != nil {
				continue
			}
			if v, _ := sc.value("weft_lease_renewals_total"); v > before[h] {
				out[h.name] = time.Since(since)
			}
		}
		if time.Now().After(deadline) {
			for _, h := range hs {
				if _, done := out[h.name]; !done {
					sc, _ := scrapeMetrics(h)
					f, _ := sc.value("weft_lease_renewal_failures_total")
					t.Fatalf("%s: no renewal within 30 s of the kill (%v failed)\n%s", h.name, f, h.daemon.LogTail(10))
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return out
}

// awaitReconnect waits until weftd on every host of hs holds a connection to the
// etcd member at addr again: the client noticed that the member came back.
func awaitReconnect(t *testing.T, addr netip.Addr, hs ...*host) {
	t.Helper()
	dst := net.JoinHostPort(addr.String(), "2379")
	for _, h := range hs {
		eventually(t, 30*time.Second, func() error {
			out, err := h.ns.Run(context.Background(), "ss", "-Htnp", "state", "established", "dst", dst)
			if err != nil {
				return err
			}
			if !strings.Contains(out, "weftd") {
				return fmt.Errorf("weftd on %s has no connection to the member at %s:\n%s", h.name, dst, out)
			}
			return nil
		})
	}
}

// etcdCtl is the test's own client of the lab's etcd cluster, from the router's
// namespace, over TLS when the cluster serves it.
type etcdCtl struct {
	l   *lab.Lab
	cfg clientv3.Config
	cli *clientv3.Client
}

func newEtcdCtl(t *testing.T, l *lab.Lab) *etcdCtl {
	t.Helper()
	cfg := clientv3.Config{
		Endpoints:   l.EtcdEndpoints(),
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return l.Router().DialContext(ctx, "tcp", addr)
		})},
	}
	if tc := l.EtcdTLS(); tc != nil {
		var err error
		if cfg.TLS, err = tc.Config(); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &etcdCtl{l: l, cfg: cfg, cli: cli}
}

// status asks member i for its status (the maintenance Status API): its own id and
// its leader's (0: none).
func (e *etcdCtl) status(i int) (self, leader uint64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	r, err := e.cli.Status(ctx, e.l.EtcdMembers()[i].Server.Endpoint())
	if err != nil {
		return 0, 0, err
	}
	return r.Header.MemberId, r.Leader, nil
}

// leader returns the index of the member every member but skip names as leader.
func (e *etcdCtl) leader(t *testing.T, skip int) int {
	t.Helper()
	idx := -1
	eventually(t, 15*time.Second, func() error {
		ids := map[uint64]int{}
		var leaders []uint64
		for i := range e.l.EtcdMembers() {
			if i == skip {
				continue
			}
			self, lead, err := e.status(i)
			if err != nil {
				return fmt.Errorf("member %d: %w", i, err)
			}
			ids[self] = i
			leaders = append(leaders, lead)
		}
		for _, lead := range leaders {
			if lead == 0 || lead != leaders[0] {
				return fmt.Errorf("members see leaders %x", leaders)
			}
		}
		i, ok := ids[leaders[0]]
		if !ok {
			return fmt.Errorf("leader %x is none of the members asked", leaders[0])
		}
		idx = i
		return nil
	})
	return idx
}

// awaitLeader waits until a member other than gone (killed at since) names as leader
// a member that is not gone, and returns that leader and how long after since it was
// seen.
func (e *etcdCtl) awaitLeader(t *testing.T, gone int, since time.Time) (int, time.Duration) {
	t.Helper()
	deadline := since.Add(20 * time.Second)
	ids := map[uint64]int{} // the live members' ids (gone's is never learnt)
	for {
		var leaders []uint64
		for i := range e.l.EtcdMembers() {
			if i == gone {
				continue
			}
			self, lead, err := e.status(i)
			if err != nil {
				continue
			}
			ids[self] = i
			leaders = append(leaders, lead)
		}
		for _, lead := range leaders {
			if j, ok := ids[lead]; ok {
				return j, time.Since(since)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader but member %d within 20 s of its kill", gone)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitMembers waits until every member answers and all agree on a leader.
func (e *etcdCtl) awaitMembers(t *testing.T) { t.Helper(); e.leader(t, -1) }

// ttl is how long the etcd lease under subnet s has left.
func (e *etcdCtl) ttl(t *testing.T, s netip.Prefix) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := e.cli.Get(ctx, prefix+"/subnets/"+lease.SubnetKey(s))
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("lease %v: %v %v", s, r, err)
	}
	l, err := e.cli.TimeToLive(ctx, clientv3.LeaseID(r.Kvs[0].Lease))
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(l.TTL) * time.Second
}

// leaseWatch records every change under prefix/subnets/ from its start on.
type leaseWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	evs    []*clientv3.Event
	rev    int64 // the last revision seen
	err    error
}

func (e *etcdCtl) watchLeases(t *testing.T) *leaseWatch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	r, err := e.cli.Get(ctx, prefix+"/subnets/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	w := &leaseWatch{cancel: wcancel, done: make(chan struct{}), rev: r.Header.Revision}
	ch := e.cli.Watch(wctx, prefix+"/subnets/", clientv3.WithPrefix(), clientv3.WithRev(r.Header.Revision+1))
	go func() {
		defer close(w.done)
		for resp := range ch {
			w.mu.Lock()
			if err := resp.Err(); err != nil && w.err == nil && wctx.Err() == nil {
				w.err = err
			}
			w.evs = append(w.evs, resp.Events...)
			if len(resp.Events) > 0 {
				w.rev = resp.Events[len(resp.Events)-1].Kv.ModRevision
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { wcancel(); <-w.done })
	return w
}

// check waits until the watch has seen etcd's current revision, then fails the test
// if a key of own was deleted or written by another host than its own.
func (w *leaseWatch) check(t *testing.T, e *etcdCtl, own map[netip.Prefix]*host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	r, err := e.cli.Get(ctx, prefix+"/subnets/", clientv3.WithPrefix())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for _, kv := range r.Kvs {
		last = max(last, kv.ModRevision)
	}
	eventually(t, 10*time.Second, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.err != nil {
			return w.err
		}
		if w.rev < last {
			return fmt.Errorf("lease watch at revision %d, etcd's leases at %d", w.rev, last)
		}
		return nil
	})
	held := map[netip.Prefix]bool{}
	for _, kv := range r.Kvs {
		s, err := lease.ParseSubnetKey(string(kv.Key))
		if err == nil {
			held[s] = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	hostIDs := map[netip.Prefix]string{}
	puts := 0
	for _, ev := range w.evs {
		s, err := lease.ParseSubnetKey(string(ev.Kv.Key))
		h, mine := own[s]
		if err != nil || !mine {
			continue
		}
		if ev.Type == mvccpb.DELETE {
			t.Errorf("%s's lease %v was deleted at revision %d", h.name, s, ev.Kv.ModRevision)
			continue
		}
		puts++
		attrs, err := lease.DecodeAttrs(ev.Kv.Value)
		if err != nil || attrs.PublicIP.String() != h.ip {
			t.Errorf("%s's lease %v rewritten at revision %d as %s (%v)", h.name, s, ev.Kv.ModRevision, ev.Kv.Value, err)
		}
		if id, seen := hostIDs[s]; seen && id != attrs.HostID {
			t.Errorf("%s's lease %v changed host id %s -> %s", h.name, s, id, attrs.HostID)
		}
		hostIDs[s] = attrs.HostID
	}
	for s, h := range own {
		if !held[s] {
			t.Errorf("%s's lease %v is gone", h.name, s)
		}
	}
	t.Logf("lease watch: %d events, %d writes to the hosts' leases (renewals)", len(w.evs), puts)
}

// leaseChurn adds and removes fake leases (198.18.200.0/24 and up, hosts that do
// not exist) while it runs: every weftd's watch has work during the failovers.
type leaseChurn struct {
	cancel context.CancelFunc
	done   chan struct{}
	writes int
}

func (e *etcdCtl) churn(t *testing.T, backend string) *leaseChurn {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := &leaseChurn{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(ch.done)
		for i := 0; ctx.Err() == nil; i++ {
			n := i % 8
			key := fmt.Sprintf("%s/subnets/198.18.%d.0-24", prefix, 200+n)
			op := clientv3.OpDelete(key)
			if (i/8)%2 == 0 {
				val := fmt.Sprintf(`{"PublicIP":"192.0.2.%d","BackendType":%q,"BackendData":{"VtepMAC":"0e:00:00:00:00:%02x"}}`, 200+n, backend, n)
				op = clientv3.OpPut(key, val)
			}
			octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := e.cli.Do(octx, op)
			ocancel()
			if err == nil {
				ch.writes++
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-ch.done })
	return ch
}

// stop ends the churn and returns how many writes it made.
func (ch *leaseChurn) stop(t *testing.T) int {
	t.Helper()
	ch.cancel()
	<-ch.done
	return ch.writes
}

// runPinger pings one pod from another without pause (every 50 ms), in runs of 40
// that each end with ping's own summary, until stopped: no reply is in flight when
// the count is read.
type runPinger struct {
	from, to string
	cancel   context.CancelFunc
	done     chan struct{}
	tx, rx   int
	lostAt   []time.Time // when each lost ping was sent, about
	lostSeq  []string
	err      error
}

func startRunPinger(t *testing.T, from *host, to, addr string) *runPinger {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &runPinger{from: from.name, to: to, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			// Not tied to ctx: a run ends by itself, and is counted whole. -W 5: the
			// last reply of a run may come late (seen: seq 40 of 40 missing with -W 1,
			// far from any failover), not lost; a run ends once every reply is in.
			start := time.Now()
			out, _ := runIn(from.pod, "ping", "-n", "-c", "40", "-i", "0.05", "-W", "5", addr)
			tx, rx, err := pingSummary(out)
			if err != nil {
				p.err = err
				return
			}
			p.tx += tx
			p.rx += rx
			for seq := 1; seq <= tx && rx < tx; seq++ {
				if !strings.Contains(out, fmt.Sprintf(" icmp_seq=%d ", seq)) {
					p.lostAt = append(p.lostAt, start.Add(time.Duration(seq-1)*50*time.Millisecond))
					p.lostSeq = append(p.lostSeq, fmt.Sprintf("seq %d/%d (%s)", seq, tx, out[strings.LastIndex(out, "\n---"):]))
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-p.done })
	return p
}

// stop waits for the run under way and returns the pings sent and answered.
func (p *runPinger) stop(t *testing.T) (tx, rx int) {
	t.Helper()
	p.cancel()
	<-p.done
	if p.err != nil {
		t.Errorf("ping %s -> %s: %v", p.from, p.to, p.err)
	}
	return p.tx, p.rx
}

func runIn(ns *netns.NS, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return ns.Run(ctx, name, args...)
}

// pingSummary reads "N packets transmitted, M received" from ping's output.
func pingSummary(out string) (tx, rx int, err error) {
	for _, line := range strings.Split(out, "\n") {
		before, _, ok := strings.Cut(line, " packets transmitted, ")
		if !ok {
			continue
		}
		if tx, err = strconv.Atoi(before); err != nil {
			break
		}
		if rx = pingReceived(line); rx < 0 {
			break
		}
		return tx, rx, nil
	}
	return 0, 0, errors.New("no summary in ping's output: " + out)
}
