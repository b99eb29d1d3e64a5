package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/lease"
)

// SoakOptions describes a soak: weftd on Hosts hosts with one backend, a ping ring
// between their pods for Duration, and an event every Every.
type SoakOptions struct {
	Weftd    string
	Backend  string // vxlan (default), udp or host-gw
	Hosts    int    // at least 4 (default 4)
	Duration time.Duration
	Every    time.Duration // between events (default 5 s)
	Seed     uint64        // the order of events and the hosts they hit
	// StateFile records what the lab made, for `weft-bench lab down` after a crash.
	StateFile string
	Progress  io.Writer // one line per event (may be nil)
}

// Soak event types.
const (
	EvLeaseAdd    = "lease add"
	EvLeaseRemove = "lease remove"
	EvEtcdRestart = "etcd restart"
	EvEtcdCompact = "etcd compact"
	EvWeftdKill   = "weftd kill -9 + restart"
	EvLinkFlap    = "underlay link flap"
	EvRouteDelete = "route deleted by hand"
	EvFdbDelete   = "fdb entry deleted by hand"
)

// soakEvents are the event types that apply to backend, in the order of a round.
func soakEvents(backend string) []string {
	ev := []string{EvLeaseAdd, EvEtcdRestart, EvWeftdKill, EvLeaseRemove, EvEtcdCompact, EvLinkFlap}
	switch backend {
	case "vxlan":
		ev = append(ev, EvRouteDelete, EvFdbDelete)
	case "host-gw":
		ev = append(ev, EvRouteDelete)
	}
	return ev
}

const (
	soakPingInterval = 20 * time.Millisecond
	// inFlight is how long before an event a ping may have been sent and still be
	// lost to it (its reply on the way); the send times of lost pings are estimates
	// between the replies around them, good to about one interval.
	inFlight     = 100 * time.Millisecond
	healthzPort  = "8475"
	soakFlapDown = time.Second
)

// soakHost is one host of the soak with its daemon and pod.
type soakHost struct {
	h       *lab.Host
	port    string // its veth's name on the router (p<index>)
	d       *lab.Daemon
	pod     *lab.Pod
	subnet  netip.Prefix
	start   ProcUsage
	restart int
}

type soak struct {
	o      SoakOptions
	l      *lab.Lab
	log    *zap.Logger
	rng    *rand.Rand
	hosts  []*soakHost
	spec   lab.DaemonSpec
	fake   []netip.Prefix // leases of hosts that do not exist, added by EvLeaseAdd
	nfake  int
	report *SoakReport
}

// Soak runs a soak and returns its score.
func Soak(ctx context.Context, o SoakOptions, log *zap.Logger) (rep *SoakReport, err error) {
	if o.Backend == "" {
		o.Backend = "vxlan"
	}
	if o.Hosts == 0 {
		o.Hosts = 4
	}
	if o.Every == 0 {
		o.Every = 5 * time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Hosts < 4 || o.Duration <= 0 || o.Weftd == "" {
		return nil, fmt.Errorf("soak: want a weftd, 4 or more hosts and a duration, got %+v", o)
	}
	var specs []lab.HostSpec
	for i := range o.Hosts {
		lan := lab.LAN1
		if o.Backend != "host-gw" && i%2 == 1 {
			lan = lab.LAN2 // half the hosts behind the router, where the backend allows
		}
		specs = append(specs, lab.HostSpec{Name: fmt.Sprintf("s%d", i), LAN: lan})
	}
	l, err := lab.New(ctx, lab.Spec{Hosts: specs, Prefix: "ws", StateFile: o.StateFile}, log)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	s := &soak{o: o, l: l, log: log, rng: rand.New(rand.NewPCG(o.Seed, 0x50a4)),
		report: &SoakReport{Backend: o.Backend, Hosts: o.Hosts, Duration: o.Duration, Events: map[string]*EventScore{}},
		spec: lab.DaemonSpec{Binary: o.Weftd, Backend: o.Backend, Weft: true,
			Args: []string{"--healthz-ip=127.0.0.1", "--healthz-port=" + healthzPort}}}
	if err := s.setup(ctx); err != nil {
		return nil, err
	}
	return s.run(ctx)
}

// fakeBase is the third octet of the first subnet EvLeaseAdd writes: the network config
// keeps the real hosts' leases below it (SubnetMax), so a fake lease never overwrites
// a live one (with the whole /16 to pick from, a host's random subnet once was one of
// the fakes, and the event took its lease away).
const fakeBase = 200

func (s *soak) setup(ctx context.Context) error {
	cfg := fmt.Sprintf(`{"Network":%q,"SubnetLen":24,"SubnetMax":"198.18.%d.0","Backend":{"Type":%q}}`,
		lab.Overlay.String(), fakeBase-1, s.o.Backend)
	if err := s.l.SetConfig(ctx, lease.DefaultPrefix, cfg); err != nil {
		return err
	}
	for i, h := range s.l.Hosts() {
		d, err := s.l.Start(ctx, h, s.spec)
		if err != nil {
			return err
		}
		s.hosts = append(s.hosts, &soakHost{h: h, d: d, port: fmt.Sprintf("p%d", i)})
	}
	for _, sh := range s.hosts {
		env, err := sh.d.WaitSubnetEnv(ctx, 60*time.Second)
		if err != nil {
			return err
		}
		sh.subnet = env.Subnet
		if env.Subnet.Addr().As4()[2] >= fakeBase {
			return fmt.Errorf("%s leased %v, above the SubnetMax the soak set", sh.h.Name, env.Subnet)
		}
		if sh.pod, err = s.l.AttachPod(ctx, sh.h, env); err != nil {
			return err
		}
	}
	for i, sh := range s.hosts {
		next := s.hosts[(i+1)%len(s.hosts)]
		if err := WaitPing(ctx, sh.pod.NS, next.pod.Addr, 60*time.Second); err != nil {
			return fmt.Errorf("before the soak, %s -> %s: %w", sh.h.Name, next.h.Name, err)
		}
	}
	return nil
}

func (s *soak) run(ctx context.Context) (*SoakReport, error) {
	rep := s.report
	for _, sh := range s.hosts {
		sh.start = procUsage(ctx, sh.d)
		sh.start.LogLines = countLines(sh.d.Log())
	}
	var streams []*pingStream
	defer func() {
		for _, p := range streams {
			p.stop()
		}
	}()
	for i, sh := range s.hosts {
		next := s.hosts[(i+1)%len(s.hosts)]
		p, err := startPingStream(sh.pod.NS, sh.h.Name, next.h.Name, next.pod.Addr, soakPingInterval)
		if err != nil {
			return nil, err
		}
		streams = append(streams, p)
	}
	began := time.Now()
	end := began.Add(s.o.Duration)
	types := soakEvents(s.o.Backend)
	var round []string
	var occ []occurrence
	for time.Now().Add(s.o.Every).Before(end) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(s.o.Every):
		}
		if len(round) == 0 {
			round = s.newRound(types)
		}
		ev := round[0]
		round = round[1:]
		at := time.Now()
		what, err := s.event(ctx, ev)
		fmt.Fprintf(s.o.Progress, "%6.1fs  %-26s %s", at.Sub(began).Seconds(), ev, what)
		if err != nil {
			fmt.Fprintf(s.o.Progress, ": %v", err)
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s (%s): %v", ev, what, err))
		}
		fmt.Fprintln(s.o.Progress)
		occ = append(occ, occurrence{typ: ev, at: at})
	}
	// Settle: the last event's effects, then the pings end.
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(end)):
	}
	for _, p := range streams {
		p.stop()
	}
	rep.Elapsed = time.Since(began)
	if err := scorePings(rep, streams, occ); err != nil {
		return nil, err
	}
	for _, sh := range s.hosts {
		u := procUsage(ctx, sh.d)
		u.LogLines = countLines(sh.d.Log())
		rep.Daemons = append(rep.Daemons, DaemonScore{Host: sh.h.Name, Start: sh.start, End: u, Restarts: sh.restart})
	}
	s.checkEnd(ctx)
	return rep, ctx.Err()
}

// newRound is every event type once, in a random order in which a lease is added
// before it is removed.
func (s *soak) newRound(types []string) []string {
	round := append([]string(nil), types...)
	s.rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
	for i, t := range round {
		if t == EvLeaseRemove && len(s.fake) == 0 {
			for j := i + 1; j < len(round); j++ {
				if round[j] == EvLeaseAdd {
					round[i], round[j] = round[j], round[i]
					break
				}
			}
		}
	}
	return round
}

// scorePings counts the pings of the stopped streams, sent and lost, and puts each
// loss on the event before it (see attribute).
func scorePings(rep *SoakReport, streams []*pingStream, occ []occurrence) error {
	for _, p := range streams {
		maxSent := int(rep.Elapsed/p.interval) + 1000
		o, err := parsePingStream(p.out.String(), p.interval, 2*time.Second, maxSent)
		if err != nil {
			return fmt.Errorf("ping %s -> %s: %w", p.from, p.to, err)
		}
		rep.PingsSent += o.Sent
		rep.PingsLost += o.Sent - o.Received
		attribute(rep, occ, o.Lost, p.interval)
	}
	return nil
}

// occurrence is one event as it happened.
type occurrence struct {
	typ string
	at  time.Time
}

// attribute charges the lost pings of one stream to events: a run of losses (pings
// lost back to back) goes whole to the last event before its first loss, or just after
// it (inFlight: a ping sent just before an event may lose its reply to it); before the
// first event it goes to "none". The time from that event to the run's end is a
// recovery time of its type.
func attribute(rep *SoakReport, occ []occurrence, lost []time.Time, interval time.Duration) {
	for _, o := range occ {
		if rep.Events[o.typ] == nil {
			rep.Events[o.typ] = &EventScore{}
		}
	}
	counted := map[string]int{}
	for _, o := range occ {
		counted[o.typ]++
		rep.Events[o.typ].Count = counted[o.typ]
	}
	for i := 0; i < len(lost); {
		j := i + 1
		for j < len(lost) && lost[j].Sub(lost[j-1]) <= 3*interval {
			j++
		}
		k := len(occ) - 1
		for k >= 0 && occ[k].at.After(lost[i].Add(inFlight)) {
			k--
		}
		typ := "none"
		if k >= 0 {
			typ = occ[k].typ
		}
		if rep.Events[typ] == nil {
			rep.Events[typ] = &EventScore{}
		}
		e := rep.Events[typ]
		e.Lost += j - i
		if k >= 0 {
			e.MaxRecover = max(e.MaxRecover, max(lost[j-1].Sub(occ[k].at), 0)+interval)
		}
		i = j
	}
}

// checkEnd counts lost leases and changed subnets and pings every pod from every
// other one.
func (s *soak) checkEnd(ctx context.Context) {
	rep := s.report
	leases, err := s.l.Leases(ctx, "")
	if err != nil {
		rep.Errors = append(rep.Errors, fmt.Sprintf("leases at the end: %v", err))
	}
	for _, sh := range s.hosts {
		v, ok := leases[lease.SubnetKey(sh.subnet)]
		var a struct{ PublicIP string }
		if !ok || json.Unmarshal([]byte(v), &a) != nil || a.PublicIP != sh.h.Addr.String() {
			rep.LeasesLost++
		}
		if env, err := lease.ReadSubnetEnv(sh.d.SubnetFile()); err != nil || env.Subnet != sh.subnet {
			rep.SubnetChanges++
		}
	}
	for _, a := range s.hosts {
		for _, b := range s.hosts {
			if a == b {
				continue
			}
			if err := WaitPing(ctx, a.pod.NS, b.pod.Addr, 30*time.Second); err != nil {
				rep.Unreachable = append(rep.Unreachable, a.h.Name+" -> "+b.h.Name)
			}
		}
	}
}

// event makes one event of type ev happen and says what it did.
func (s *soak) event(ctx context.Context, ev string) (string, error) {
	i := s.rng.IntN(len(s.hosts))
	sh, next := s.hosts[i], s.hosts[(i+1)%len(s.hosts)]
	switch ev {
	case EvLeaseAdd:
		s.nfake++
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(fakeBase + s.nfake%50), 0}), 24)
		pub := netip.AddrFrom4([4]byte{192, 0, 2, byte(200 + s.nfake%50)})
		data := fmt.Sprintf(`{"VtepMAC":"0e:00:00:00:00:%02x"}`, s.nfake%50)
		val := fmt.Sprintf(`{"PublicIP":%q,"BackendType":%q,"BackendData":%s}`, pub, s.o.Backend, data)
		s.fake = append(s.fake, p)
		return p.String(), s.l.Put(ctx, lease.DefaultPrefix+"/subnets/"+lease.SubnetKey(p), val)
	case EvLeaseRemove:
		if len(s.fake) == 0 {
			return "none to remove", nil
		}
		p := s.fake[0]
		s.fake = s.fake[1:]
		return p.String(), s.l.Delete(ctx, lease.DefaultPrefix+"/subnets/"+lease.SubnetKey(p))
	case EvEtcdRestart:
		return "", s.l.Etcd().Restart(ctx)
	case EvEtcdCompact:
		rev, err := s.compact(ctx)
		return fmt.Sprintf("at revision %d", rev), err
	case EvWeftdKill:
		return sh.h.Name, s.killRestart(ctx, sh)
	case EvLinkFlap:
		if _, err := s.l.Router().Run(ctx, "ip", "link", "set", sh.port, "down"); err != nil {
			return sh.h.Name, err
		}
		time.Sleep(soakFlapDown)
		_, err := s.l.Router().Run(ctx, "ip", "link", "set", sh.port, "up")
		return sh.h.Name + " eth0, down " + soakFlapDown.String(), err
	case EvRouteDelete:
		_, err := sh.h.NS.Run(ctx, "ip", "route", "del", next.subnet.Masked().String())
		return fmt.Sprintf("on %s, to %s", sh.h.Name, next.subnet.Masked()), err
	case EvFdbDelete:
		mac, err := vxlanMAC(ctx, next)
		if err != nil {
			return "", err
		}
		_, err = sh.h.NS.Run(ctx, "bridge", "fdb", "del", mac, "dev", "flannel.1")
		return fmt.Sprintf("on %s, %s (%s)", sh.h.Name, mac, next.h.Name), err
	}
	return "", fmt.Errorf("unknown event %q", ev)
}

// killRestart kills weftd on sh with SIGKILL and starts it again at once, as systemd
// would, then waits until it is healthy; a subnet other than the one it had counts.
func (s *soak) killRestart(ctx context.Context, sh *soakHost) error {
	if err := sh.d.Kill(); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	d, err := s.l.Start(ctx, sh.h, s.spec)
	if err != nil {
		return err
	}
	sh.d = d
	sh.restart++
	for {
		if err := healthz(ctx, sh.h); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("weftd on %s not healthy after its restart:\n%s", sh.h.Name, d.LogTail(10))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if env, err := lease.ReadSubnetEnv(d.SubnetFile()); err != nil || env.Subnet != sh.subnet {
		s.report.SubnetChanges++
		return fmt.Errorf("weftd on %s: subnet.env after the restart: %v %v, had %v", sh.h.Name, env.Subnet, err, sh.subnet)
	}
	return nil
}

// compact compacts etcd's history up to its current revision.
func (s *soak) compact(ctx context.Context) (int64, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: s.l.Router().DialContext}, Timeout: 10 * time.Second}
	post := func(path, body string, out any) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, lab.EtcdEndpoint+path, strings.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("etcd %s: %s: %s", path, resp.Status, b)
		}
		return json.NewDecoder(resp.Body).Decode(out)
	}
	var r struct {
		Header struct {
			Revision int64 `json:"revision,string"`
		} `json:"header"`
	}
	if err := post("/v3/kv/range", `{"key":"AA=="}`, &r); err != nil {
		return 0, err
	}
	var ignored struct{}
	err := post("/v3/kv/compaction", fmt.Sprintf(`{"revision":%d,"physical":true}`, r.Header.Revision), &ignored)
	if err != nil && strings.Contains(err.Error(), "required revision has been compacted") {
		return r.Header.Revision, nil // nothing written since the last compaction
	}
	return r.Header.Revision, err
}

// vxlanMAC is the MAC of flannel.1 on sh.
func vxlanMAC(ctx context.Context, sh *soakHost) (string, error) {
	out, err := sh.h.NS.Run(ctx, "cat", "/sys/class/net/flannel.1/address")
	return strings.TrimSpace(out), err
}

// healthz asks weftd's /healthz on h.
func healthz(ctx context.Context, h *lab.Host) error {
	hc := &http.Client{Transport: &http.Transport{DialContext: h.NS.DialContext}, Timeout: 2 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+healthzPort+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: %s", resp.Status)
	}
	return nil
}

// goroutines reads go_goroutines from weftd's /metrics on h; -1 when it cannot.
func goroutines(ctx context.Context, h *lab.Host) int {
	hc := &http.Client{Transport: &http.Transport{DialContext: h.NS.DialContext}, Timeout: 2 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+healthzPort+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := hc.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return -1
	}
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, "go_goroutines "); ok {
			var n float64
			if _, err := fmt.Sscan(v, &n); err == nil {
				return int(n)
			}
		}
	}
	return -1
}

// countLines counts the non-empty lines of s.
func countLines(s string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n
}

// ProcUsage is a daemon's resource use at one moment.
type ProcUsage struct {
	Threads int `json:"threads"`
	// Goroutines is weftd's go_goroutines from /metrics; -1 when it could not be read.
	Goroutines int   `json:"goroutines"`
	FDs        int   `json:"fds"`
	RSSKiB     int64 `json:"rss_kib"`
	LogLines   int   `json:"log_lines"` // lines in its log so far (over restarts)
}

// procUsage reads threads, RSS and open descriptors of the daemon from /proc, and its
// goroutines from its /metrics.
func procUsage(ctx context.Context, d *lab.Daemon) ProcUsage {
	u := ProcUsage{Goroutines: goroutines(ctx, d.Host)}
	pid := d.Pid()
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) >= 2 && f[0] == "Threads:" {
				fmt.Sscan(f[1], &u.Threads)
			}
			if len(f) >= 2 && f[0] == "VmRSS:" {
				fmt.Sscan(f[1], &u.RSSKiB)
			}
		}
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		u.FDs = len(ents)
	}
	return u
}
