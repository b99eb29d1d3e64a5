package kube

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

// Hold keeps our annotations in place (re-publishing them if someone removes them)
// until ctx ends. A podCIDR is fixed for a node's life, so our lease never moves; its
// attributes do when Republish says so. A failed patch is tried again, after
// holdRetryMin doubling up to holdRetryMax, until it succeeds.
func (m *Manager) Hold(ctx context.Context, own lease.Lease, _ func(lease.Lease)) error {
	c, unsubscribe, err := m.subscribe(ctx)
	if err != nil {
		return err
	}
	defer unsubscribe()
	var (
		retry <-chan time.Time
		wait  = holdRetryMin
	)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.ch:
			c.take()
		case <-m.republish:
		case <-retry:
		}
		retry = nil
		attrs := own.Attrs
		if h := m.held.Load(); h != nil {
			attrs = h.Attrs
		}
		n, ok := m.node()
		if !ok {
			continue
		}
		if err := m.annotate(ctx, n, attrs); err != nil && ctx.Err() == nil {
			m.log.Warn("re-publishing our annotations failed; trying again", zap.Error(err), zap.Duration("in", wait))
			retry = time.After(wait)
			wait = min(2*wait, holdRetryMax)
			continue
		}
		wait = holdRetryMin
	}
}

// How long Hold waits before it patches our node again after a failure: the first
// failure of a republish is often the connection the old address took with it.
const (
	holdRetryMin = 100 * time.Millisecond
	holdRetryMax = 10 * time.Second
)

// Republish has Hold publish attrs as our node's annotations at once, and keep them
// from then on: the external interface got another address, and peers must send to
// the new public IP. It does nothing before Acquire.
func (m *Manager) Republish(attrs lease.Attrs) {
	h := m.held.Load()
	if h == nil {
		return
	}
	next := *h
	next.Attrs = attrs
	m.held.Store(&next)
	notify(m.republish)
}
