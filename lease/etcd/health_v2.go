package etcd

import (
	"context"
	"time"

	"google.golang.org/grpc/connectivity"
)

// probeEvery is how often the v2 registry asks etcd for its version while
// MonitorReachability waits: the v2 API is plain HTTP and has no connection state to
// watch. One small GET per host every few seconds is the price of not being silent
// through an outage.
const probeEvery = 2 * time.Second

// connState is the result of the last probe: Ready until one fails.
func (e *etcd2) connState() connectivity.State {
	if s := connectivity.State(e.state.Load()); s != connectivity.Idle {
		return s
	}
	return connectivity.Ready
}

// waitConnChange probes etcd every probeEvery until the outcome differs from s.
func (e *etcd2) waitConnChange(ctx context.Context, s connectivity.State) bool {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, probeEvery)
		_, err := e.cli.GetVersion(pctx)
		cancel()
		if ctx.Err() != nil {
			return false
		}
		now := connectivity.Ready
		if err != nil {
			now = connectivity.TransientFailure
		}
		e.state.Store(int32(now))
		if now != s {
			return true
		}
	}
}
