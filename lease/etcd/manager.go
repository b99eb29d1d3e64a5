package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

var (
	// ErrNoFreeSubnet is returned when every subnet between SubnetMin and SubnetMax is leased.
	ErrNoFreeSubnet = errors.New("no free subnet")
	// ErrPublicIPConflict is returned when another host holds a lease for our PublicIP.
	ErrPublicIPConflict = errors.New("PublicIP already in use by another host")
	// ErrRaceLost is returned when other hosts kept taking the subnets we chose.
	ErrRaceLost = errors.New("lost the race for a subnet too often")
)

const createAttempts = 10

// ManagerOptions tune a Manager; zero values take the defaults.
type ManagerOptions struct {
	SubnetFile    string        // subnet.env of an earlier run: its subnet is preferred
	StateFile     string        // weft's durable state (our subnet and host identity)
	RenewMargin   time.Duration // renew this long before expiry (60 min)
	TTL           time.Duration // lease lifetime (24 h)
	RetryInterval time.Duration // between failed renewals (1 min)
	ConfigPoll    time.Duration // between looks for a missing config (1 s)
}

// Manager is the lease.Manager over a Registry.
type Manager struct {
	reg  Registry
	opts ManagerOptions
	log  *zap.Logger

	mu  sync.Mutex
	cfg *lease.Config
	st  lease.State
	// attrs is what Republish asked Hold to publish (nil: nothing); republish wakes
	// Hold for it.
	attrs     *lease.Attrs
	republish chan struct{}

	// downSince is when etcd became unreachable (Unix ns; 0 while it is reachable or
	// nobody watches, see MonitorReachability), for Health.
	downSince atomic.Int64

	cnt managerCounters // for Stats
}

// What weftd may ask of it beyond lease.Manager (lease/capabilities.go).
var (
	_ lease.Manager             = (*Manager)(nil)
	_ lease.StatsReporter       = (*Manager)(nil)
	_ lease.HealthReporter      = (*Manager)(nil)
	_ lease.Republisher         = (*Manager)(nil)
	_ lease.ReachabilityMonitor = (*Manager)(nil)
)

// NewManager returns a Manager over reg.
func NewManager(reg Registry, opts ManagerOptions, log *zap.Logger) *Manager {
	if opts.RenewMargin <= 0 {
		opts.RenewMargin = 60 * time.Minute
	}
	if opts.TTL <= 0 {
		opts.TTL = lease.DefaultTTL
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = time.Minute
	}
	if opts.ConfigPoll <= 0 {
		opts.ConfigPoll = time.Second
	}
	return &Manager{reg: reg, opts: opts, log: log, republish: make(chan struct{}, 1)}
}

// Republish has Hold write attrs (our host identity kept) into our lease at once, and
// renew it with them from then on: the external interface got another address, and
// peers must send to the new PublicIP. Failed writes are retried every RetryInterval.
func (m *Manager) Republish(attrs lease.Attrs) {
	m.mu.Lock()
	m.attrs = &attrs
	m.mu.Unlock()
	select {
	case m.republish <- struct{}{}:
	default:
	}
}

// takeAttrs returns what Republish asked for, if anything, with hostID.
func (m *Manager) takeAttrs(hostID string) (lease.Attrs, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.attrs == nil {
		return lease.Attrs{}, false
	}
	a := *m.attrs
	m.attrs = nil
	a.HostID = hostID
	return a, true
}

// Close closes the registry.
func (m *Manager) Close() error { return m.reg.Close() }

// Config waits for <prefix>/config and parses it. A config that does not parse is an
// error; a missing one is polled for every ConfigPoll. While etcd cannot be asked
// (unreachable, TLS, authentication, permission) it retries with backoff, and says
// why at once, again whenever the cause changes, and every 30 s while it lasts.
func (m *Manager) Config(ctx context.Context) (*lease.Config, error) {
	var (
		lastLog  time.Time
		lastWhy  string
		bo       = newBackoff()
		attempts int
	)
	for {
		data, err := m.reg.Config(ctx)
		attempts++
		if err == nil {
			cfg, err := lease.ParseConfig(data)
			if err != nil {
				return nil, err
			}
			m.mu.Lock()
			m.cfg = cfg
			m.mu.Unlock()
			return cfg, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		wait, msg, why := m.opts.ConfigPoll, "waiting for the network config", "no config"
		if !errors.Is(err, ErrNoConfig) {
			wait = max(bo.next(), m.opts.ConfigPoll)
			msg, why = "cannot read the network config from etcd; retrying", errorSummary(err)
		} else {
			bo.reset()
		}
		if why != lastWhy || time.Since(lastLog) > 30*time.Second {
			if why == "no config" {
				m.log.Warn(msg, zap.Error(err))
			} else {
				m.log.Error(msg, zap.Error(err), zap.String("retry-in", wait.Round(time.Millisecond).String()), zap.Int("attempt", attempts))
			}
			lastLog, lastWhy = time.Now(), why
		} else {
			m.log.Debug(msg, zap.Error(err), zap.String("retry-in", wait.Round(time.Millisecond).String()), zap.Int("attempt", attempts))
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

func (m *Manager) config() (*lease.Config, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cfg == nil {
		return nil, errors.New("lease manager: Config must be called before Acquire")
	}
	return m.cfg, nil
}

// Acquire leases a subnet for each family the config enables (IPv4, IPv6 or both, in
// one key): ours by PublicIP, else the previous ones, else random free ones. While
// etcd is unreachable it waits, retrying with backoff.
func (m *Manager) Acquire(ctx context.Context, attrs lease.Attrs) (lease.Lease, error) {
	cfg, err := m.config()
	if err != nil {
		return lease.Lease{}, err
	}
	st, err := lease.LoadState(m.opts.StateFile)
	if err != nil {
		return lease.Lease{}, err
	}
	m.mu.Lock()
	m.st = st
	m.mu.Unlock()
	attrs.HostID = st.HostID
	bo := newBackoff()
	for attempt := 0; attempt < createAttempts; {
		l, err := m.tryAcquire(ctx, cfg, attrs)
		switch {
		case err == nil:
			st.Network, st.Subnet = cfg.Network, l.Subnet
			st.IPv6Network, st.IPv6Subnet = cfg.IPv6Network, l.IPv6Subnet
			if serr := lease.SaveState(m.opts.StateFile, st); serr != nil {
				m.log.Warn("could not record the lease", zap.Error(serr))
			}
			m.cnt.held(l.Expiration)
			return l, nil
		case errors.Is(err, ErrTaken):
			attempt++
			m.log.Info("subnet taken by another host meanwhile; trying again", zap.Error(err))
		case errors.Is(err, ErrNoFreeSubnet), errors.Is(err, ErrPublicIPConflict), errors.Is(err, lease.ErrBadValue):
			return lease.Lease{}, err
		default:
			m.log.Warn("acquiring a lease failed; retrying", zap.Error(err))
		}
		if err := sleep(ctx, bo.next()); err != nil {
			return lease.Lease{}, err
		}
	}
	return lease.Lease{}, fmt.Errorf("%w (%d attempts)", ErrRaceLost, createAttempts)
}

func (m *Manager) tryAcquire(ctx context.Context, cfg *lease.Config, attrs lease.Attrs) (lease.Lease, error) {
	listing, err := m.reg.List(ctx)
	if err != nil {
		return lease.Lease{}, err
	}
	taken4 := map[netip.Prefix]bool{}
	var taken6 []netip.Prefix
	mark := func(k lease.Key) {
		if k.Subnet.IsValid() {
			taken4[k.Subnet] = true
		}
		if k.IPv6Subnet.IsValid() {
			taken6 = append(taken6, k.IPv6Subnet)
		}
	}
	for _, k := range listing.Unreadable {
		mark(k)
	}
	for _, l := range listing.Leases {
		mark(l.Key())
	}
	// 1. The lease that holds our PublicIP (our PublicIPv6 on an IPv6-only host).
	for _, l := range listing.Leases {
		if !samePublicIP(l.Attrs, attrs) {
			continue
		}
		if l.Attrs.HostID != "" && l.Attrs.HostID != attrs.HostID {
			return lease.Lease{}, fmt.Errorf("%w: %s holds %v with host id %s (ours is %s); if that host is gone, delete its key or wait for its lease to expire",
				ErrPublicIPConflict, publicName(attrs), l.Key(), l.Attrs.HostID, attrs.HostID)
		}
		ours := attrs.BackendType
		if ours == "" {
			ours = "udp"
		}
		// flanneld's udp leases carry no BackendType: compatible, not ours to drop.
		// A reservation (no TTL) is ours whatever backend wrote it, and stays TTL-less.
		if (l.Reserved || lease.CompatibleWith(ours, l)) && fits(cfg, l.Key()) {
			ttl := m.opts.TTL
			if l.Reserved {
				ttl = 0
			}
			exp, err := m.reg.Update(ctx, l.Key(), attrs, ttl)
			if err != nil {
				return lease.Lease{}, err
			}
			if l.Reserved {
				m.log.Info("using our reservation", zap.Stringer("lease", l.Key()))
			} else {
				m.log.Info("reusing our lease", zap.Stringer("lease", l.Key()))
			}
			return lease.Lease{Subnet: l.Subnet, IPv6Subnet: l.IPv6Subnet, Attrs: attrs, Expiration: exp, Reserved: l.Reserved}, nil
		}
		// Another backend, or a lease of other families or lengths than the config's
		// (IPv6 switched on or off): flanneld deletes it too, a reservation included.
		m.log.Info("removing our incompatible lease", zap.Stringer("lease", l.Key()),
			zap.String("backend", l.Attrs.BackendType))
		if err := m.reg.Delete(ctx, l.Key()); err != nil {
			return lease.Lease{}, err
		}
		delete(taken4, l.Subnet)
		taken6 = slices.DeleteFunc(taken6, func(p netip.Prefix) bool { return p == l.IPv6Subnet })
	}
	// 2. The subnets we had before, each family on its own, if still free.
	var k lease.Key
	why := "previous subnet"
	prev4, prev6 := m.previous()
	if cfg.EnableIPv4 {
		for _, p := range prev4 {
			if cfg.InRange(p) && !taken4[p] {
				k.Subnet = p
				break
			}
		}
	}
	if cfg.EnableIPv6 {
		for _, p := range prev6 {
			if _, hit := overlapping(p, taken6); cfg.InRangeV6(p) && !hit {
				k.IPv6Subnet = p
				break
			}
		}
	}
	// 3. Random free ones for the families still without a subnet.
	if cfg.EnableIPv4 && !k.Subnet.IsValid() {
		why = "free subnet"
		s, ok := pickFree(cfg, taken4)
		if !ok {
			return lease.Lease{}, fmt.Errorf("%w in %v between %v and %v", ErrNoFreeSubnet, cfg.Network, cfg.SubnetMin, cfg.SubnetMax)
		}
		k.Subnet = s
	}
	if cfg.EnableIPv6 && !k.IPv6Subnet.IsValid() {
		why = "free subnet"
		if k.IPv6Subnet, err = pickV6(cfg, taken6); err != nil {
			return lease.Lease{}, err
		}
	}
	if !k.IsValid() {
		return lease.Lease{}, errors.New("lease manager: the network config enables neither IPv4 nor IPv6")
	}
	return m.create(ctx, k, attrs, why)
}

// pickFree returns a random subnet between SubnetMin and SubnetMax that taken does
// not hold. Up to 2^16 subnets, every free one is listed and one drawn evenly. A
// larger range (flanneld accepts up to 2^30 subnets) is probed at random, then
// scanned from a random start: the work is bounded by the leases, not the range.
func pickFree(cfg *lease.Config, taken map[netip.Prefix]bool) (netip.Prefix, bool) {
	lo, hi := cfg.Index(cfg.SubnetMin), cfg.Index(cfg.SubnetMax)
	n := hi - lo + 1
	if n <= 1<<16 {
		var free []netip.Prefix
		for i := lo; i <= hi; i++ {
			if s := cfg.Subnet(i); !taken[s] {
				free = append(free, s)
			}
		}
		if len(free) == 0 {
			return netip.Prefix{}, false
		}
		return free[rand.IntN(len(free))], true
	}
	for range 64 {
		if s := cfg.Subnet(lo + rand.IntN(n)); !taken[s] {
			return s, true
		}
	}
	start := rand.IntN(n)
	for k := range min(n, len(taken)+1) {
		if s := cfg.Subnet(lo + (start+k)%n); !taken[s] {
			return s, true
		}
	}
	return netip.Prefix{}, false
}

// samePublicIP reports whether two lease values name the same host: the same IPv4
// PublicIP, or, where either has none (IPv6-only, PublicIP 0.0.0.0 as flanneld writes
// it), the same PublicIPv6.
func samePublicIP(a, b lease.Attrs) bool {
	has4 := func(x lease.Attrs) bool { return x.PublicIP.IsValid() && !x.PublicIP.IsUnspecified() }
	if has4(a) && has4(b) {
		return a.PublicIP == b.PublicIP
	}
	return a.PublicIPv6.IsValid() && a.PublicIPv6 == b.PublicIPv6
}

// publicName is the address a names its host by, for messages.
func publicName(a lease.Attrs) string {
	if a.PublicIP.IsValid() && !a.PublicIP.IsUnspecified() {
		return a.PublicIP.String()
	}
	return a.PublicIPv6.String()
}

// fits reports whether a lease named k can be ours under c: a subnet in range for
// each family c enables, none for a family it does not.
func fits(c *lease.Config, k lease.Key) bool {
	ok4 := !k.Subnet.IsValid()
	if c.EnableIPv4 {
		ok4 = c.InRange(k.Subnet)
	}
	ok6 := !k.IPv6Subnet.IsValid()
	if c.EnableIPv6 {
		ok6 = c.InRangeV6(k.IPv6Subnet)
	}
	return ok4 && ok6
}

func (m *Manager) create(ctx context.Context, k lease.Key, attrs lease.Attrs, why string) (lease.Lease, error) {
	exp, err := m.reg.Create(ctx, k, attrs, m.opts.TTL)
	if err != nil {
		return lease.Lease{}, err
	}
	m.log.Info("leased "+why, zap.Stringer("lease", k))
	return lease.Lease{Subnet: k.Subnet, IPv6Subnet: k.IPv6Subnet, Attrs: attrs, Expiration: exp}, nil
}

// previous lists the subnets we held before, IPv4 and IPv6: from subnet.env, then
// the state file.
func (m *Manager) previous() (v4, v6 []netip.Prefix) {
	if m.opts.SubnetFile != "" {
		if env, err := lease.ReadSubnetEnv(m.opts.SubnetFile); err == nil {
			if env.Subnet.IsValid() {
				v4 = append(v4, env.Subnet)
			}
			if env.IPv6Subnet.IsValid() {
				v6 = append(v6, env.IPv6Subnet)
			}
		}
	}
	m.mu.Lock()
	if m.st.Subnet.IsValid() {
		v4 = append(v4, m.st.Subnet)
	}
	if m.st.IPv6Subnet.IsValid() {
		v6 = append(v6, m.st.IPv6Subnet)
	}
	m.mu.Unlock()
	return v4, v6
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// backoff doubles from 100 ms to 30 s, with jitter.
type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{} }

func (b *backoff) next() time.Duration {
	switch {
	case b.d == 0:
		b.d = 100 * time.Millisecond
	case b.d < 30*time.Second:
		b.d = min(2*b.d, 30*time.Second)
	}
	return b.d/2 + rand.N(b.d/2+1)
}

func (b *backoff) reset() { b.d = 0 }
