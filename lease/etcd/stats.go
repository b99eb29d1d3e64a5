package etcd

import (
	"sync/atomic"
	"time"
)

// Stats is a snapshot of what the lease manager has done since it started, for
// weftd's /metrics.
type Stats struct {
	Expiration    time.Time // when our lease runs out (zero before one is held)
	Renewals      uint64    // successful renewals of our lease
	RenewFailures uint64    // renewals that failed (retried)
	Resyncs       uint64    // re-lists of the other hosts' leases after the first one
	WatchErrors   uint64    // lists and watches of the other hosts' leases that failed
	EtcdReachable bool      // false while MonitorEtcd sees the connection down
}

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

// Stats returns the manager's counters.
func (m *Manager) Stats() Stats {
	s := Stats{
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
