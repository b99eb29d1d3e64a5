package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/lease"
)

// TestStats: on a real etcd, the counters /metrics reads follow what the
// manager does: the expiry of the acquired lease, then renewals (a 3 s TTL renewed
// 2 s before it runs out) that push the expiry on. (Watch errors and resyncs: e2e
// TestMetrics, over a real etcd outage.)
func TestStats(t *testing.T) {
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		s := newStore(t, srv, api)
		m := newManager(t, s, `{"Network":"198.18.0.0/16"}`, ManagerOptions{TTL: 3 * time.Second, RenewMargin: 2 * time.Second})
		if st := m.Stats(); !st.Expiration.IsZero() || st.Renewals != 0 {
			t.Fatalf("before Acquire: %+v", st)
		}
		ctx, cancel := context.WithCancel(testCtx(t, time.Minute))
		defer cancel()
		own, err := m.Acquire(ctx, lease.Attrs{PublicIP: ourIP, BackendType: "udp"})
		if err != nil {
			t.Fatal(err)
		}
		first := m.Stats()
		if !first.Expiration.Equal(own.Expiration) {
			t.Fatalf("expiration %v, lease says %v", first.Expiration, own.Expiration)
		}
		if !first.EtcdReachable {
			t.Error("etcd reported unreachable before anyone looked")
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = m.Hold(ctx, own, func(lease.Lease) {}) }()
		eventually(t, 20*time.Second, "two renewals", func() bool { return m.Stats().Renewals >= 2 })
		if st := m.Stats(); !st.Expiration.After(first.Expiration) {
			t.Errorf("expiry did not move on with the renewals: %v -> %v", first.Expiration, st.Expiration)
		}
		if st := m.Stats(); st.RenewFailures != 0 {
			t.Errorf("%d renewal failures against a healthy etcd", st.RenewFailures)
		}

		cancel()
		<-done
	})
}
