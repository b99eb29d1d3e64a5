package etcd

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"
)

// connStater is implemented by registries whose link to etcd has a state that can be
// waited on: the v3 API's gRPC connection, or (v2, plain HTTP) the outcome of a probe.
type connStater interface {
	connState() connectivity.State
	// waitConnChange blocks until the state differs from s (true) or ctx ends (false).
	waitConnChange(ctx context.Context, s connectivity.State) bool
}

// unreachableAfter is how long the connection must stay down before it is reported:
// reconnects are not worth a line.
const unreachableAfter = 5 * time.Second

// MonitorReachability logs one warning when etcd has been unreachable for a few
// seconds and one line when it is back, until ctx ends. Forwarding never depends on it; without this
// the daemon would be silent through an outage until a renewal failed, up to an hour
// later. On the v3 API it costs etcd nothing: it watches the client's own connection
// state; on v2 it asks etcd for its version every probeEvery.
func (m *Manager) MonitorReachability(ctx context.Context) {
	cs, ok := m.reg.(connStater)
	if !ok {
		return
	}
	var downSince time.Time
	reported := false
	s := cs.connState()
	for {
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if s == connectivity.Ready {
			m.downSince.Store(0)
			if reported {
				m.log.Info("etcd reachable again", zap.Duration("unreachable-for", time.Since(downSince).Round(time.Second)))
			}
			downSince, reported = time.Time{}, false
		} else {
			if downSince.IsZero() {
				downSince = time.Now()
				m.downSince.Store(downSince.UnixNano())
			}
			if !reported {
				wctx, cancel = context.WithDeadline(ctx, downSince.Add(unreachableAfter))
			}
		}
		changed := cs.waitConnChange(wctx, s)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if !changed {
			m.log.Warn("etcd unreachable: forwarding goes on with the last known leases",
				zap.Duration("for", time.Since(downSince).Round(time.Second)), zap.Stringer("state", s))
			reported = true
			continue
		}
		s = cs.connState()
	}
}

// Health returns nil unless MonitorReachability has seen etcd unreachable for longer
// than a reconnect takes; then the watch of the other hosts' leases is not current
// (weftd's /readyz says so, while forwarding goes on with the last known leases).
func (m *Manager) Health(now time.Time) error {
	ns := m.downSince.Load()
	if ns == 0 {
		return nil
	}
	if d := now.Sub(time.Unix(0, ns)); d >= unreachableAfter {
		return fmt.Errorf("%w for %s: forwarding with the last known leases", ErrUnreachable, d.Round(time.Second))
	}
	return nil
}
