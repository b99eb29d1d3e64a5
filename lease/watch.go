package lease

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
)

// Watch sends every lease but own that has a subnet of a family the network config
// enables (an IPv6-only lease means nothing to an IPv4 network): one snapshot batch,
// then changes. Leases are told apart by their whole key, so IPv6-only and dual-stack
// leases are followed alike.
func (m *EtcdManager) Watch(ctx context.Context, own Key, events chan<- []Event) error {
	cfg, err := m.config()
	if err != nil {
		return err
	}
	keep := func(k Key) bool { return k != own && cfg.Usable(k) }
	return m.follow(ctx, &m.cnt, keep, func(evs []Event, _ bool) {
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
func (m *EtcdManager) follow(ctx context.Context, cnt *managerCounters, keep func(Key) bool, handle func([]Event, bool)) error {
	if cnt == nil {
		cnt = &managerCounters{} // counted nowhere
	}
	known := map[Key]Lease{}
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
func resync(known map[Key]Lease, listing Listing, keep func(Key) bool) []Event {
	evs := []Event{}
	seen := map[Key]bool{}
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
			evs = append(evs, Event{Type: Added, Lease: l})
		}
	}
	for s, l := range known {
		if !seen[s] {
			delete(known, s)
			evs = append(evs, Event{Type: Removed, Lease: l})
		}
	}
	return evs
}

func (m *EtcdManager) apply(known map[Key]Lease, chs []Change, keep func(Key) bool) []Event {
	var evs []Event
	for _, c := range chs {
		s := c.Lease.Key()
		if !keep(s) {
			continue
		}
		switch {
		case c.Bad != nil:
			m.log.Error("skipping malformed lease", zap.Stringer("key", s), zap.Error(c.Bad))
		case c.Type == Removed:
			if old, ok := known[s]; ok {
				delete(known, s)
				evs = append(evs, Event{Type: Removed, Lease: old})
			}
		default:
			if old, ok := known[s]; !ok || !old.Attrs.Equal(c.Lease.Attrs) {
				known[s] = c.Lease
				evs = append(evs, Event{Type: Added, Lease: c.Lease})
			}
		}
	}
	return evs
}

// Hold renews own before it expires and re-acquires it when someone deletes it.
func (m *EtcdManager) Hold(ctx context.Context, own Lease, changed func(Lease)) error {
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
	watchOwn := func(s Key) func() {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = m.follow(wctx, nil, func(k Key) bool { return k == s }, func(evs []Event, snapshot bool) {
				for _, e := range evs {
					if e.Type == Removed || e.Lease.Attrs.HostID != hostID {
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

	for {
		wait := time.Until(own.Expiration) - m.opts.RenewMargin
		if own.Expiration.IsZero() {
			wait = 0
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(max(wait, 0)):
			exp, err := m.reg.Update(ctx, own.Key(), own.Attrs, m.opts.TTL)
			if err == nil {
				own.Expiration = exp
				m.cnt.renewals.Add(1)
				m.cnt.held(exp)
				m.log.Info("lease renewed", zap.Stringer("lease", own.Key()), zap.Time("expires", exp))
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
