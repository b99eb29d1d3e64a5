package etcd

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

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
	stopWatch := m.watchOwn(ctx, own.Key(), hostID, signal)
	defer func() { stopWatch() }()

	// republished: own.Attrs changed (Republish) and etcd does not have them yet.
	republished := false
	for {
		renew := m.renewTimer(own, republished)
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
			stopWatch = m.watchOwn(ctx, next.Key(), hostID, signal)
			own = next
			changed(next)
			continue
		}
		own = next
	}
}

// watchOwn follows our key s and calls signal when it is deleted or taken over (by
// a host other than hostID); the function it returns stops the watch and waits for it.
func (m *Manager) watchOwn(ctx context.Context, s lease.Key, hostID string, signal func()) (stop func()) {
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

// renewTimer fires when own is due for renewal: RenewMargin before it expires, at
// once when it has no expiry or carries attributes etcd does not have yet
// (republished). A reservation has no TTL to renew: only its loss or new attributes
// wake Hold, so its timer is nil unless republished.
func (m *Manager) renewTimer(own lease.Lease, republished bool) <-chan time.Time {
	if own.Reserved && !republished {
		return nil
	}
	wait := time.Until(own.Expiration) - m.opts.RenewMargin
	if own.Expiration.IsZero() || republished {
		wait = 0
	}
	return time.After(max(wait, 0))
}
