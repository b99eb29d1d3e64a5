package kube

import (
	"errors"
	"fmt"
	"time"
)

// Reasons Health gives for not being ready.
var (
	errNotSynced    = errors.New("node cache not synced with the API server yet")
	errNoContact    = errors.New("no word from the API server's node watch yet")
	errWatchFailing = errors.New("node watch failing")
	errWatchStale   = errors.New("node watch gone quiet")
	errNoLease      = errors.New("no lease yet: waiting for our node's podCIDR")
	errLeaseLost    = errors.New("lease not held")
)

// Health returns nil when the lease is held and the node watch is current: the
// informer has synced, the API server was heard from after the last failure to list or
// watch nodes and within Options.WatchStale, and our node still carries the podCIDR
// we hold and our annotations. Otherwise the error says why (weftd's /readyz body).
func (m *Manager) Health(now time.Time) error {
	select {
	case <-m.synced:
	default:
		return errNotSynced
	}
	if err := m.contact.check(now, m.opts.WatchStale); err != nil {
		return err
	}
	held := m.held.Load()
	if held == nil {
		return errNoLease
	}
	n, ok := m.node()
	if !ok {
		return fmt.Errorf("%w: node %s is gone", errLeaseLost, m.name())
	}
	if l, err := m.ownLease(n); err != nil || l.Key() != held.Key() {
		return fmt.Errorf("%w: node %s has podCIDRs %q, we hold %s", errLeaseLost, n.Name, n.Spec.PodCIDRs, held.Key())
	}
	if !m.published(n, held.Attrs) {
		return fmt.Errorf("%w: our annotations are missing on node %s (publishing them again)", errLeaseLost, n.Name)
	}
	return nil
}
