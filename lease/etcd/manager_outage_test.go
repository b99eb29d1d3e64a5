package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/etcdtest"
	"github.com/weftnet/weft/lease"
)

// outage is how long etcd stays down: the length of the scenario, not a wait for
// something to happen.
const outage = 3 * time.Second

// TestWatchSurvivesEtcdOutage stops etcd under a running Watch: the last known leases
// stay (no Removed events, no empty snapshot), a Watch started meanwhile sends nothing
// until etcd is back, and both resume with exactly the changes made afterwards.
func TestWatchSurvivesEtcdOutage(t *testing.T) {
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			srv := etcdtest.Start(t) // its own etcd: the test stops it
			s := newStore(t, srv, api)
			const cfg = `{"Network":"198.18.0.0/16"}`
			create(t, s, pfx("198.18.1.0/24"), peer1)
			create(t, s, pfx("198.18.2.0/24"), peer2)
			snapshot := evs(ev(lease.Added, "198.18.1.0/24", peer1), ev(lease.Added, "198.18.2.0/24", peer2))
			m1 := newManager(t, s, cfg, ManagerOptions{})
			m2 := newManager(t, s, "", ManagerOptions{})
			ch1 := watchEvents(t, m1, lease.Key{Subnet: pfx("198.18.100.0/24")})
			expectBatch(t, ch1, snapshot)

			srv.Stop()
			ch2 := watchEvents(t, m2, lease.Key{Subnet: pfx("198.18.100.0/24")})
			down := time.NewTimer(outage)
			defer down.Stop()
			for stop := false; !stop; {
				select {
				case evs := <-ch1:
					t.Fatalf("events while etcd is down: %s", describeEvents(evs))
				case evs := <-ch2:
					t.Fatalf("a watch started while etcd is down sent %q", describeEvents(evs))
				case <-down.C:
					stop = true
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := srv.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			expectBatch(t, ch2, snapshot)
			create(t, s, pfx("198.18.3.0/24"), peer3)
			expectBatch(t, ch1, ev(lease.Added, "198.18.3.0/24", peer3))
			expectBatch(t, ch2, ev(lease.Added, "198.18.3.0/24", peer3))
		})
	}
}
