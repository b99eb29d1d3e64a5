package etcd

import (
	"sync/atomic"
	"time"

	"github.com/weftnet/weft/lease"
)

// managerCounters are written by the manager's goroutines, read by Stats.
type managerCounters struct {
	expiration    atomic.Int64 // Unix ns
	renewals      atomic.Uint64
	renewFailures atomic.Uint64
	resyncs       atomic.Uint64
	watchErrors   atomic.Uint64
}

// held records our lease's expiry; a reservation's zero time is stored as 0 (none).
func (c *managerCounters) held(exp time.Time) {
	if exp.IsZero() {
		c.expiration.Store(0)
		return
	}
	c.expiration.Store(exp.UnixNano())
}

// Stats returns the manager's counters, for weftd's /metrics: its renewals, its
// lists and watches of the other hosts' leases, and whether etcd is reachable.
func (m *Manager) Stats() lease.Stats {
	s := lease.Stats{
		Source:        lease.SourceEtcd,
		Renewals:      m.cnt.renewals.Load(),
		RenewFailures: m.cnt.renewFailures.Load(),
		Resyncs:       m.cnt.resyncs.Load(),
		WatchErrors:   m.cnt.watchErrors.Load(),
		EtcdReachable: m.downSince.Load() == 0,
	}
	if ns := m.cnt.expiration.Load(); ns != 0 {
		s.Expiration = time.Unix(0, ns)
	}
	return s
}
