package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/lease"
)

// watchEvents runs m.Watch(own) until the test ends and returns its batches.
func watchEvents(t *testing.T, m *Manager, own lease.Key) <-chan []lease.Event {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan []lease.Event, 64)
	done := make(chan error, 1)
	go func() { done <- m.Watch(ctx, own, ch) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Watch returned %v, want context.Canceled", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Watch did not return after cancel")
		}
	})
	return ch
}

// batch is the next batch of events, as sorted "added 198.18.1.0-24 192.0.2.10" lines.
func batch(t *testing.T, ch <-chan []lease.Event) string {
	t.Helper()
	select {
	case evs := <-ch:
		return describeEvents(evs)
	case <-time.After(60 * time.Second):
		t.Fatal("no batch of events within 60s")
	}
	return ""
}

func describeEvents(evs []lease.Event) string {
	var out []string
	for _, e := range evs {
		v6 := ""
		if e.Lease.Attrs.PublicIPv6.IsValid() {
			v6 = "," + e.Lease.Attrs.PublicIPv6.String()
		}
		out = append(out, fmt.Sprintf("%v %v %v%s%s", e.Type, e.Lease.Key(), e.Lease.Attrs.PublicIP, v6, e.Lease.Attrs.BackendData))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

func ev(typ lease.EventType, sub string, a lease.Attrs) string {
	return describeEvents([]lease.Event{{Type: typ, Lease: lease.Lease{Subnet: pfx(sub), Attrs: a}}})
}

func evs(lines ...string) string {
	slices.Sort(lines)
	return strings.Join(lines, "; ")
}

func expectBatch(t *testing.T, ch <-chan []lease.Event, want string) {
	t.Helper()
	if got := batch(t, ch); got != want {
		t.Fatalf("batch\n  %s\nwant\n  %s", got, want)
	}
}

var (
	peer1  = lease.Attrs{PublicIP: addr("192.0.2.11"), BackendType: "udp", HostID: "p1"}
	peer2  = lease.Attrs{PublicIP: addr("192.0.2.12"), BackendType: "udp"}
	peer2b = lease.Attrs{PublicIP: addr("192.0.2.12"), BackendType: "udp", BackendData: []byte(`{"v":2}`)}
	peer3  = lease.Attrs{PublicIP: addr("192.0.2.13")}
)

func TestWatchSnapshotAndChanges(t *testing.T) {
	// Our random subnet stays below the peers' fixed ones (198.18.201-204.0/24).
	const cfg = `{"Network":"198.18.0.0/16","SubnetMax":"198.18.200.0"}`
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		ctx := testCtx(t, 2*time.Minute)
		s := newStore(t, srv, api)
		m := newManager(t, s, cfg, ManagerOptions{})
		own, err := m.Acquire(ctx, lease.Attrs{PublicIP: ourIP, BackendType: "udp"})
		if err != nil {
			t.Fatal(err)
		}
		create(t, s, pfx("198.18.201.0/24"), peer1)
		ch := watchEvents(t, m, own.Key())
		expectBatch(t, ch, ev(lease.Added, "198.18.201.0/24", peer1)) // never our own subnet
		create(t, s, pfx("198.18.202.0/24"), peer2)
		expectBatch(t, ch, ev(lease.Added, "198.18.202.0/24", peer2))
		if _, err := s.reg.Update(ctx, lease.Key{Subnet: pfx("198.18.202.0/24")}, peer2b, time.Hour); err != nil {
			t.Fatal(err)
		}
		expectBatch(t, ch, ev(lease.Added, "198.18.202.0/24", peer2b))
		// A renewal of our own lease, and one that changes nothing, send nothing.
		if _, err := s.reg.Update(ctx, own.Key(), own.Attrs, time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := s.reg.Update(ctx, lease.Key{Subnet: pfx("198.18.201.0/24")}, peer1, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := s.reg.Delete(ctx, lease.Key{Subnet: pfx("198.18.201.0/24")}); err != nil {
			t.Fatal(err)
		}
		expectBatch(t, ch, ev(lease.Removed, "198.18.201.0/24", peer1))
		// Malformed values and keys are skipped: no event, and the lease whose value
		// went bad is kept, not removed.
		s.put(t, "/subnets/198.18.202.0-24", "garbage")
		s.put(t, "/subnets/198.18.203.0-24", `{"PublicIP":"fd00::1"}`)
		s.put(t, "/subnets/junk", `{"PublicIP":"192.0.2.99"}`)
		create(t, s, pfx("198.18.204.0/24"), peer3)
		expectBatch(t, ch, ev(lease.Added, "198.18.204.0/24", peer3))
		s.del(t, "/subnets/198.18.202.0-24")
		expectBatch(t, ch, ev(lease.Removed, "198.18.202.0/24", peer2b))
	})
}

func TestWatchEmptySnapshot(t *testing.T) {
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		s := newStore(t, srv, api)
		m := newManager(t, s, `{"Network":"198.18.0.0/16"}`, ManagerOptions{})
		ch := watchEvents(t, m, lease.Key{Subnet: pfx("198.18.1.0/24")})
		select {
		case first := <-ch:
			if first == nil || len(first) != 0 {
				t.Fatalf("first batch %v, want an empty snapshot", first)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("no snapshot")
		}
		create(t, s, pfx("198.18.2.0/24"), peer1)
		expectBatch(t, ch, ev(lease.Added, "198.18.2.0/24", peer1))
	})
}

// gated holds the first Watch back until released, so that the store can move on
// (and lose history) meanwhile; it reports what that first Watch returned.
type gated struct {
	Registry
	started  chan int64
	release  chan struct{}
	firstErr chan error
	first    chan struct{} // holds one token: taken by the first Watch
}

func newGated(reg Registry) *gated {
	g := &gated{Registry: reg, started: make(chan int64, 1), release: make(chan struct{}),
		firstErr: make(chan error, 1), first: make(chan struct{}, 1)}
	g.first <- struct{}{}
	return g
}

func (g *gated) Watch(ctx context.Context, rev int64, f func([]Change)) error {
	select {
	case <-g.first:
	default:
		return g.Registry.Watch(ctx, rev, f)
	}
	g.started <- rev
	select {
	case <-g.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	err := g.Registry.Watch(ctx, rev, f)
	g.firstErr <- err
	return err
}

func TestWatchGapSendsDifference(t *testing.T) {
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		ctx := testCtx(t, 2*time.Minute)
		s := newStore(t, srv, api)
		create(t, s, pfx("198.18.1.0/24"), peer1)
		create(t, s, pfx("198.18.2.0/24"), peer2)
		create(t, s, pfx("198.18.3.0/24"), peer3)
		g := newGated(s.reg)
		s.reg = g
		m := newManager(t, s, `{"Network":"198.18.0.0/16"}`, ManagerOptions{})
		ch := watchEvents(t, m, lease.Key{Subnet: pfx("198.18.100.0/24")})
		expectBatch(t, ch, evs(ev(lease.Added, "198.18.1.0/24", peer1), ev(lease.Added, "198.18.2.0/24", peer2), ev(lease.Added, "198.18.3.0/24", peer3)))
		select {
		case <-g.started:
		case <-time.After(60 * time.Second):
			t.Fatal("the manager did not start watching")
		}
		if err := s.reg.Delete(ctx, lease.Key{Subnet: pfx("198.18.1.0/24")}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.reg.Update(ctx, lease.Key{Subnet: pfx("198.18.2.0/24")}, peer2b, time.Hour); err != nil {
			t.Fatal(err)
		}
		create(t, s, pfx("198.18.4.0/24"), peer1)
		s.gap(t)
		close(g.release)
		if err := <-g.firstErr; !errors.Is(err, ErrGap) {
			t.Fatalf("the held-back watch returned %v, want ErrGap", err)
		}
		// One batch with exactly the difference; 198.18.3.0/24 is not sent again.
		expectBatch(t, ch, evs(ev(lease.Removed, "198.18.1.0/24", peer1), ev(lease.Added, "198.18.2.0/24", peer2b), ev(lease.Added, "198.18.4.0/24", peer1)))
		if err := s.reg.Delete(ctx, lease.Key{Subnet: pfx("198.18.3.0/24")}); err != nil {
			t.Fatal(err)
		}
		expectBatch(t, ch, ev(lease.Removed, "198.18.3.0/24", peer3))
	})
}
