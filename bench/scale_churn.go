package bench

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/weftnet/weft/bench/lab"
)

// record runs churn on the daemon pid, planned to last d, and keeps its figures: the
// changes made, their rate, the update latency percentiles, the updates missed and
// the daemon's CPU meanwhile.
func (c *ScaleChurn) record(pid int, d time.Duration, churn func() (lat []float64, ops, missed int, err error)) error {
	c0, _ := lab.ProcCPU(pid)
	w0 := time.Now()
	lat, ops, missed, err := churn()
	if err != nil {
		return err
	}
	c1, _ := lab.ProcCPU(pid)
	c.ChurnCPUPct = 100 * (c1 - c0).Seconds() / time.Since(w0).Seconds()
	c.ChurnOps, c.Missed = ops, missed
	c.ChurnRate = float64(ops) / d.Seconds()
	if len(lat) > 0 {
		c.P50Ms, c.P99Ms, c.MaxMs = Percentile(lat, 50), Percentile(lat, 99), Percentile(lat, 100)
	}
	return nil
}

// updateWait counts the data-path updates a churn waits for and keeps their latency.
type updateWait struct {
	mu      sync.Mutex
	lat     []float64 // ms
	pending int
}

// expect counts one more update, its change made at t, and returns what its route
// event calls.
func (u *updateWait) expect(t time.Time) func(time.Time) {
	u.mu.Lock()
	u.pending++
	u.mu.Unlock()
	return func(at time.Time) {
		u.mu.Lock()
		u.lat = append(u.lat, float64(at.Sub(t).Microseconds())/1000)
		u.pending--
		u.mu.Unlock()
	}
}

// wait gives the pending updates 10 s, then returns the latencies and how many never
// came.
func (u *updateWait) wait(ctx context.Context) (lat []float64, missed int) {
	_ = poll(ctx, 10*time.Second, 20*time.Millisecond, func() (bool, error) {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.pending == 0, nil
	})
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]float64(nil), u.lat...), u.pending
}

// pickNear takes a random one of the first 64 subnets of q out of it.
func (r *scaleRun) pickNear(q []netip.Prefix) (netip.Prefix, []netip.Prefix) {
	j := r.rnd.Intn(min(len(q), 64))
	p := q[j]
	return p, append(q[:j], q[j+1:]...)
}

// churn changes leases at Rate per second for Churn: each change deletes a simulated
// host's lease or adds one in a free subnet, alternately, so N stays. On kernel
// backends each change's latency runs from just before the etcd write to the route's
// netlink event; a change whose route event never came within 10 s is missed.
func (r *scaleRun) churn(ctx context.Context, v *daemonView, own netip.Prefix) (lat []float64, ops, missed int, err error) {
	var updates updateWait
	free, simList := r.freeAndLeased(ctx, own)
	tick := time.NewTicker(time.Second / time.Duration(r.o.Rate))
	defer tick.Stop()
	end := time.Now().Add(r.o.Churn)
	compactAt := time.Now().Add(r.o.Churn / 2)
	compacted := false
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return nil, 0, 0, ctx.Err()
		case <-tick.C:
		}
		if !compacted && time.Now().After(compactAt) {
			compacted = true
			rev, err := r.compact(ctx)
			if err != nil {
				return nil, 0, 0, err
			}
			r.progress("  compacted etcd at revision %d", rev)
		}
		add := ops%2 == 1 || len(simList) == 0
		var p netip.Prefix
		if add {
			// From the front of the free queue: a subnet deleted during the churn goes
			// to its back, so an add never races the delete of the same key (the
			// daemon could rightly coalesce the two into no change at all).
			p, free = r.pickNear(free)
		} else {
			// The oldest leases go first, for the same reason.
			p, simList = r.pickNear(simList)
		}
		t := time.Now()
		if v.routes != nil {
			v.routes.expect(p, add, updates.expect(t))
		}
		if add {
			simList = append(simList, p)
			err = r.addSim(ctx, p)
		} else {
			free = append(free, p)
			err = r.dropSim(ctx, p)
		}
		if err != nil {
			return nil, 0, 0, fmt.Errorf("scale: churn write: %w", err)
		}
		ops++
	}
	if v.routes == nil {
		return nil, ops, 0, nil
	}
	lat, missed = updates.wait(ctx)
	return lat, ops, missed, nil
}
