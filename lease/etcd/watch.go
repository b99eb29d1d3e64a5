package etcd

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

// Watch sends every lease but own that has a subnet of a family the network config
// enables (an IPv6-only lease means nothing to an IPv4 network): one snapshot batch,
// then changes. Leases are told apart by their whole key, so IPv6-only and dual-stack
// leases are followed alike.
func (m *Manager) Watch(ctx context.Context, own lease.Key, events chan<- []lease.Event) error {
	cfg, err := m.config()
	if err != nil {
		return err
	}
	keep := func(k lease.Key) bool { return k != own && cfg.Usable(k) }
	return m.follow(ctx, &m.cnt, keep, func(evs []lease.Event, _ bool) {
		select {
		case events <- evs:
		case <-ctx.Done():
		}
	})
}

// follow lists the leases keep selects, then watches them; after any error it backs
// off, lists again and hands on exactly the difference to what it handed on before.
// An error is never taken for an empty list: the last known leases stay until etcd
// says otherwise. Re-lists and failures are counted in cnt unless it is nil.
func (m *Manager) follow(ctx context.Context, cnt *managerCounters, keep func(lease.Key) bool, handle func([]lease.Event, bool)) error {
	if cnt == nil {
		cnt = &managerCounters{} // counted nowhere
	}
	known := map[lease.Key]lease.Lease{}
	first := true
	bo := newBackoff()
	var lastLog time.Time
	quietly := func(msg string, err error) {
		if time.Since(lastLog) > 30*time.Second {
			m.log.Warn(msg, zap.Error(err))
			lastLog = time.Now()
		}
	}
	for {
		listing, err := m.reg.List(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			cnt.watchErrors.Add(1)
			quietly("listing leases failed; keeping the last known ones", err)
			if err := sleep(ctx, bo.next()); err != nil {
				return err
			}
			continue
		}
		if !first {
			cnt.resyncs.Add(1)
		}
		evs := resync(known, listing, keep)
		if first || len(evs) > 0 {
			handle(evs, first)
		}
		first = false
		err = m.reg.Watch(ctx, listing.Rev, func(chs []Change) {
			bo.reset()
			if evs := m.apply(known, chs, keep); len(evs) > 0 {
				handle(evs, false)
			}
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cnt.watchErrors.Add(1)
		if errors.Is(err, ErrGap) {
			m.log.Info("lease watch interrupted; listing again", zap.Error(err))
		} else {
			quietly("lease watch failed; listing again", err)
		}
		if err := sleep(ctx, bo.next()); err != nil {
			return err
		}
	}
}

// resync makes known match listing and returns the events that do so.
func resync(known map[lease.Key]lease.Lease, listing Listing, keep func(lease.Key) bool) []lease.Event {
	evs := []lease.Event{}
	seen := map[lease.Key]bool{}
	for _, k := range listing.Unreadable {
		seen[k] = true // unreadable now: keep what we knew of it
	}
	for _, l := range listing.Leases {
		k := l.Key()
		if !keep(k) {
			continue
		}
		seen[k] = true
		if old, ok := known[k]; !ok || !old.Attrs.Equal(l.Attrs) {
			known[k] = l
			evs = append(evs, lease.Event{Type: lease.Added, Lease: l})
		}
	}
	for s, l := range known {
		if !seen[s] {
			delete(known, s)
			evs = append(evs, lease.Event{Type: lease.Removed, Lease: l})
		}
	}
	return evs
}

func (m *Manager) apply(known map[lease.Key]lease.Lease, chs []Change, keep func(lease.Key) bool) []lease.Event {
	var evs []lease.Event
	for _, c := range chs {
		s := c.Lease.Key()
		if !keep(s) {
			continue
		}
		switch {
		case c.Bad != nil:
			m.log.Error("skipping malformed lease", zap.Stringer("key", s), zap.Error(c.Bad))
		case c.Type == lease.Removed:
			if old, ok := known[s]; ok {
				delete(known, s)
				evs = append(evs, lease.Event{Type: lease.Removed, Lease: old})
			}
		default:
			if old, ok := known[s]; !ok || !old.Attrs.Equal(c.Lease.Attrs) {
				known[s] = c.Lease
				evs = append(evs, lease.Event{Type: lease.Added, Lease: c.Lease})
			}
		}
	}
	return evs
}

// Hold renews own before it expires and re-acquires it when someone deletes it.
func (m *Manager) Hold(ctx context.Context, own lease.Lease, changed func(lease.Lease)) error {
	lost := make(chan struct{}, 1)
	signal := func() {
		select {
		case lost <- struct{}{}:
		default:
		}
	}
	hostID := own.Attrs.HostID
	// watchOwn follows our key and signals when it is deleted or taken over; the
	// function it returns stops the watch and waits for it.
	watchOwn := func(s lease.Key) func() {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = m.follow(wctx, nil, func(k lease.Key) bool { return k == s }, func(evs []lease.Event, snapshot bool) {
				for _, e := range evs {
					if e.Type == lease.Removed || e.Lease.Attrs.HostID != hostID {
						signal()
						return
					}
				}
				if snapshot && len(evs) == 0 {
					signal()
				}
			})
		}()
		return func() { cancel(); <-done }
	}
	stopWatch := watchOwn(own.Key())
	defer func() { stopWatch() }()

	// republished: own.Attrs changed (Republish) and etcd does not have them yet.
	republished := false
	for {
		// A reservation has no TTL to renew: only its loss or new attributes wake us.
		var renew <-chan time.Time
		if !own.Reserved || republished {
			wait := time.Until(own.Expiration) - m.opts.RenewMargin
			if own.Expiration.IsZero() || republished {
				wait = 0
			}
			renew = time.After(max(wait, 0))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.republish:
			a, ok := m.takeAttrs(hostID)
			if !ok {
				continue
			}
			own.Attrs, republished = a, true
			m.log.Info("publishing new attributes in our lease", zap.Stringer("lease", own.Key()),
				zap.Stringer("public-ip", a.PublicIP), zap.Stringer("public-ipv6", a.PublicIPv6))
			continue
		case <-renew:
			ttl := m.opts.TTL
			if own.Reserved {
				ttl = 0 // keep the reservation TTL-less
			}
			exp, err := m.reg.Update(ctx, own.Key(), own.Attrs, ttl)
			if err == nil {
				own.Expiration = exp
				m.cnt.renewals.Add(1)
				m.cnt.held(exp)
				m.log.Info("lease renewed", zap.Stringer("lease", own.Key()), zap.Time("expires", exp))
				republished = false
				continue
			}
			if !errors.Is(err, ErrNotFound) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				m.cnt.renewFailures.Add(1)
				m.log.Warn("renewing the lease failed; retrying", zap.Error(err), zap.Duration("in", m.opts.RetryInterval))
				if err := sleep(ctx, m.opts.RetryInterval); err != nil {
					return err
				}
				continue
			}
		case <-lost:
		}
		m.log.Warn("our lease is gone; acquiring it again", zap.Stringer("lease", own.Key()))
		next, err := m.Acquire(ctx, own.Attrs)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			m.log.Error("re-acquiring the lease failed; retrying", zap.Error(err))
			if err := sleep(ctx, m.opts.RetryInterval); err != nil {
				return err
			}
			signal()
			continue
		}
		republished = false // Acquire wrote own.Attrs
		if next.Key() != own.Key() {
			stopWatch()
			stopWatch = watchOwn(next.Key())
			own = next
			changed(next)
			continue
		}
		own = next
	}
}
