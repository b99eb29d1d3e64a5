package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/lease"
)

// watcher runs reg.Watch from rev until stopped (at the latest when the test ends),
// handing on single changes.
type watcher struct {
	changes chan Change
	exited  chan struct{} // closed when Watch returned err
	err     error
	cancel  context.CancelFunc
	once    sync.Once
}

func startWatch(t *testing.T, reg Registry, rev int64) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{changes: make(chan Change, 4096), exited: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(w.exited)
		w.err = reg.Watch(ctx, rev, func(chs []Change) {
			for _, c := range chs {
				w.changes <- c
			}
		})
	}()
	t.Cleanup(func() { w.stop(t) })
	return w
}

// stop cancels the watch and returns what Watch returned.
func (w *watcher) stop(t *testing.T) error {
	w.once.Do(func() {
		w.cancel()
		select {
		case <-w.exited:
		case <-time.After(30 * time.Second):
			t.Error("Watch did not return after cancel")
		}
	})
	return w.err
}

func (w *watcher) next(t *testing.T) Change {
	t.Helper()
	select {
	case c := <-w.changes:
		return c
	case <-w.exited:
		t.Fatalf("Watch returned %v while a change was awaited", w.err)
	case <-time.After(30 * time.Second):
		t.Fatal("no change within 30s")
	}
	return Change{}
}

func describe(c Change) string {
	return fmt.Sprintf("%v %v %v %s %s bad=%v", c.Type, c.Lease.Subnet, c.Lease.Attrs.PublicIP,
		c.Lease.Attrs.BackendType, c.Lease.Attrs.HostID, c.Bad != nil)
}

func TestRegistryWatch(t *testing.T) {
	attrsA2 := attrsA
	attrsA2.BackendData = []byte(`{"v":2}`)
	cases := []struct {
		name string
		run  func(t *testing.T, s *store)
	}{
		{"changes from a revision", func(t *testing.T, s *store) {
			ctx := testCtx(t, 60*time.Second)
			a, b := pfx("198.18.1.0/24"), pfx("198.18.2.0/24")
			l, err := s.reg.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Half the changes happen before the watch starts: they come from history.
			if _, err := s.reg.Create(ctx, lease.Key{Subnet: a}, attrsA, time.Hour); err != nil {
				t.Fatal(err)
			}
			if _, err := s.reg.Create(ctx, lease.Key{Subnet: b}, attrsB, time.Hour); err != nil {
				t.Fatal(err)
			}
			w := startWatch(t, s.reg, l.Rev)
			if _, err := s.reg.Update(ctx, lease.Key{Subnet: a}, attrsA2, time.Hour); err != nil {
				t.Fatal(err)
			}
			if err := s.reg.Delete(ctx, lease.Key{Subnet: b}); err != nil {
				t.Fatal(err)
			}
			s.put(t, "/subnets/not-a-subnet", `{"PublicIP":"192.0.2.99"}`)
			s.put(t, "/subnets/198.18.3.0-24", "garbage")
			s.put(t, "/config", `{"Network":"198.18.0.0/16"}`)
			if _, err := s.reg.Create(ctx, lease.Key{Subnet: b}, attrsA, time.Hour); err != nil {
				t.Fatal(err)
			}
			for i, want := range []Change{
				{Type: lease.Added, Lease: lease.Lease{Subnet: a, Attrs: attrsA}},
				{Type: lease.Added, Lease: lease.Lease{Subnet: b, Attrs: attrsB}},
				{Type: lease.Added, Lease: lease.Lease{Subnet: a, Attrs: attrsA2}},
				{Type: lease.Removed, Lease: lease.Lease{Subnet: b}},
				{Type: lease.Added, Lease: lease.Lease{Subnet: pfx("198.18.3.0/24")}, Bad: lease.ErrBadValue},
				{Type: lease.Added, Lease: lease.Lease{Subnet: b, Attrs: attrsA}},
			} {
				got := w.next(t)
				if describe(got) != describe(want) || !got.Lease.Attrs.Equal(want.Lease.Attrs) ||
					want.Bad != nil && !errors.Is(got.Bad, want.Bad) {
					t.Fatalf("change %d: %s (%+v), want %s", i, describe(got), got.Lease.Attrs, describe(want))
				}
			}
			if err := w.stop(t); !errors.Is(err, context.Canceled) {
				t.Errorf("Watch after cancel returned %v, want context.Canceled", err)
			}
		}},
		{"expiry is a removal", func(t *testing.T, s *store) {
			ctx := testCtx(t, 60*time.Second)
			sub := pfx("198.18.4.0/24")
			l, err := s.reg.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			w := startWatch(t, s.reg, l.Rev)
			if _, err := s.reg.Create(ctx, lease.Key{Subnet: sub}, attrsA, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			if c := w.next(t); c.Type != lease.Added || c.Lease.Subnet != sub {
				t.Fatalf("first change %s, want added %v", describe(c), sub)
			}
			if c := w.next(t); c.Type != lease.Removed || c.Lease.Subnet != sub {
				t.Fatalf("second change %s, want removed %v", describe(c), sub)
			}
		}},
		{"gap", func(t *testing.T, s *store) {
			ctx := testCtx(t, 60*time.Second)
			l, err := s.reg.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.reg.Create(ctx, lease.Key{Subnet: pfx("198.18.5.0/24")}, attrsA, time.Hour); err != nil {
				t.Fatal(err)
			}
			s.gap(t)
			err = s.reg.Watch(ctx, l.Rev, func(chs []Change) {
				t.Errorf("changes %v delivered from a revision that is gone", chs)
			})
			if !errors.Is(err, ErrGap) {
				t.Fatalf("Watch from a lost revision = %v, want ErrGap", err)
			}
			// From the present it works again.
			l, err = s.reg.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			w := startWatch(t, s.reg, l.Rev)
			if err := s.reg.Delete(ctx, lease.Key{Subnet: pfx("198.18.5.0/24")}); err != nil {
				t.Fatal(err)
			}
			if c := w.next(t); c.Type != lease.Removed || c.Lease.Subnet != pfx("198.18.5.0/24") {
				t.Fatalf("change after re-list: %s", describe(c))
			}
		}},
	}
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) { tc.run(t, newStore(t, srv, api)) })
		}
	})
}
