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
