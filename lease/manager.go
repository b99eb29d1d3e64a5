package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
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

// ManagerOptions tune an EtcdManager; zero values take the defaults.
type ManagerOptions struct {
	SubnetFile    string        // subnet.env of an earlier run: its subnet is preferred
	StateFile     string        // weft's durable state (our subnet and host identity)
	RenewMargin   time.Duration // renew this long before expiry (60 min)
	TTL           time.Duration // lease lifetime (24 h)
	RetryInterval time.Duration // between failed renewals (1 min)
	ConfigPoll    time.Duration // between looks for a missing config (1 s)
}

// EtcdManager is the lease.Manager over a Registry.
type EtcdManager struct {
	reg  Registry
	opts ManagerOptions
	log  *zap.Logger

	mu  sync.Mutex
	cfg *Config
	st  state

	// downSince is when etcd became unreachable (Unix ns; 0 while it is reachable or
	// nobody watches, see MonitorEtcd), for Health.
	downSince atomic.Int64

	cnt managerCounters // for Stats
}

// NewManager returns a Manager over reg.
func NewManager(reg Registry, opts ManagerOptions, log *zap.Logger) *EtcdManager {
	if opts.RenewMargin <= 0 {
		opts.RenewMargin = 60 * time.Minute
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = time.Minute
	}
	if opts.ConfigPoll <= 0 {
		opts.ConfigPoll = time.Second
	}
	return &EtcdManager{reg: reg, opts: opts, log: log}
}

// Close closes the registry.
func (m *EtcdManager) Close() error { return m.reg.Close() }

// Config waits for <prefix>/config and parses it. A config that does not parse is an
// error; a missing one is polled for every ConfigPoll. While etcd cannot be asked
// (unreachable, TLS, authentication, permission) it retries with backoff, and says
// why at once, again whenever the cause changes, and every 30 s while it lasts.
func (m *EtcdManager) Config(ctx context.Context) (*Config, error) {
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
			cfg, err := ParseConfig(data)
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

func (m *EtcdManager) config() (*Config, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cfg == nil {
		return nil, errors.New("lease manager: Config must be called before Acquire")
	}
	return m.cfg, nil
}

// Acquire leases a subnet: ours by PublicIP, else the previous one, else a random
// free one. While etcd is unreachable it waits, retrying with backoff.
func (m *EtcdManager) Acquire(ctx context.Context, attrs Attrs) (Lease, error) {
	cfg, err := m.config()
	if err != nil {
		return Lease{}, err
	}
	st, err := loadState(m.opts.StateFile)
	if err != nil {
		return Lease{}, err
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
			if serr := saveState(m.opts.StateFile, st); serr != nil {
				m.log.Warn("could not record the lease", zap.Error(serr))
			}
			m.cnt.held(l.Expiration)
			return l, nil
		case errors.Is(err, ErrTaken):
			attempt++
			m.log.Info("subnet taken by another host meanwhile; trying again", zap.Error(err))
		case errors.Is(err, ErrNoFreeSubnet), errors.Is(err, ErrPublicIPConflict), errors.Is(err, ErrBadValue):
			return Lease{}, err
		default:
			m.log.Warn("acquiring a lease failed; retrying", zap.Error(err))
		}
		if err := sleep(ctx, bo.next()); err != nil {
			return Lease{}, err
		}
	}
	return Lease{}, fmt.Errorf("%w (%d attempts)", ErrRaceLost, createAttempts)
}

func (m *EtcdManager) tryAcquire(ctx context.Context, cfg *Config, attrs Attrs) (Lease, error) {
	listing, err := m.reg.List(ctx)
	if err != nil {
		return Lease{}, err
	}
	taken := map[netip.Prefix]bool{}
	for _, s := range listing.Unreadable {
		taken[s] = true
	}
	for _, l := range listing.Leases {
		taken[l.Subnet] = true
	}
	// 1. The lease that holds our PublicIP.
	for _, l := range listing.Leases {
		if l.Attrs.PublicIP != attrs.PublicIP {
			continue
		}
		if l.Attrs.HostID != "" && l.Attrs.HostID != attrs.HostID {
			return Lease{}, fmt.Errorf("%w: %v holds %v with host id %s (ours is %s); if that host is gone, delete its key or wait for its lease to expire",
				ErrPublicIPConflict, attrs.PublicIP, l.Subnet, l.Attrs.HostID, attrs.HostID)
		}
		if l.IPv6Subnet.IsValid() {
			// A dual-stack lease (flanneld's, or ours from a dual-stack run): its key is
			// not the one an IPv4 lease would have, so it is neither renewed nor
			// deleted here; its subnet stays taken until it expires.
			m.log.Warn("a dual-stack lease holds our PublicIP; leaving it to expire",
				zap.Stringer("subnet", l.Subnet), zap.Stringer("ipv6_subnet", l.IPv6Subnet))
			continue
		}
		ours := attrs.BackendType
		if ours == "" {
			ours = "udp"
		}
		// flanneld's udp leases carry no BackendType: compatible, not ours to drop.
		if CompatibleWith(ours, l) && cfg.InRange(l.Subnet) {
			exp, err := m.reg.Update(ctx, l.Subnet, attrs, m.opts.TTL)
			if err != nil {
				return Lease{}, err
			}
			m.log.Info("reusing our lease", zap.Stringer("subnet", l.Subnet))
			return Lease{Subnet: l.Subnet, Attrs: attrs, Expiration: exp}, nil
		}
		m.log.Info("removing our incompatible lease", zap.Stringer("subnet", l.Subnet),
			zap.String("backend", l.Attrs.BackendType))
		if err := m.reg.Delete(ctx, l.Subnet); err != nil {
			return Lease{}, err
		}
		delete(taken, l.Subnet)
	}
	// 2. The subnet we had before, if it is still free.
	for _, prev := range m.previous() {
		if cfg.InRange(prev) && !taken[prev] {
			return m.create(ctx, prev, attrs, "previous subnet")
		}
	}
	// 3. A random free one.
	s, ok := pickFree(cfg, taken)
	if !ok {
		return Lease{}, fmt.Errorf("%w in %v between %v and %v", ErrNoFreeSubnet, cfg.Network, cfg.SubnetMin, cfg.SubnetMax)
	}
	return m.create(ctx, s, attrs, "free subnet")
}

// pickFree returns a random subnet between SubnetMin and SubnetMax that taken does
// not hold. Up to 2^16 subnets, every free one is listed and one drawn evenly. A
// larger range (flanneld accepts up to 2^30 subnets) is probed at random, then
// scanned from a random start: the work is bounded by the leases, not the range.
func pickFree(cfg *Config, taken map[netip.Prefix]bool) (netip.Prefix, bool) {
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

func (m *EtcdManager) create(ctx context.Context, s netip.Prefix, attrs Attrs, why string) (Lease, error) {
	exp, err := m.reg.Create(ctx, s, attrs, m.opts.TTL)
	if err != nil {
		return Lease{}, err
	}
	m.log.Info("leased "+why, zap.Stringer("subnet", s))
	return Lease{Subnet: s, Attrs: attrs, Expiration: exp}, nil
}

// previous lists the subnets we held before: from subnet.env, then the state file.
func (m *EtcdManager) previous() []netip.Prefix {
	var out []netip.Prefix
	if m.opts.SubnetFile != "" {
		if env, err := ReadSubnetEnv(m.opts.SubnetFile); err == nil && env.Subnet.IsValid() {
			out = append(out, env.Subnet)
		}
	}
	m.mu.Lock()
	if m.st.Subnet.IsValid() {
		out = append(out, m.st.Subnet)
	}
	m.mu.Unlock()
	return out
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
