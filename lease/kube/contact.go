package kube

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/weftnet/weft/lease"
)

// contact records how the node informer's talk with the API server goes: when it last
// heard from it (a list, a watch opened, an event or bookmark on a watch) and the last
// failure. It is what "the watch is recent" means for readiness.
type contact struct {
	mu    sync.Mutex
	last  time.Time
	err   error
	errAt time.Time
	now   func() time.Time
}

func (c *contact) heard() {
	c.mu.Lock()
	c.last = c.now()
	c.mu.Unlock()
}

func (c *contact) failed(err error) {
	c.mu.Lock()
	c.err, c.errAt = err, c.now()
	c.mu.Unlock()
}

// check returns nil when the API server was heard from after the last failure and
// within stale of now.
func (c *contact) check(now time.Time, stale time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.last.IsZero() && c.err == nil:
		return errNoContact
	case c.err != nil && !c.errAt.Before(c.last):
		return fmt.Errorf("%w since %s: %w", errWatchFailing, c.errAt.UTC().Format(time.RFC3339), c.err)
	case now.Sub(c.last) > stale:
		return fmt.Errorf("%w: last heard %s ago", errWatchStale, now.Sub(c.last).Round(time.Second))
	}
	return nil
}

// nodeAPI is the Node list and watch the informer uses: client-go's typed client, or
// wireNodes, which decodes only what weftd keeps.
type nodeAPI interface {
	List(ctx context.Context, o metav1.ListOptions) (*corev1.NodeList, error)
	Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)
}

// listStats counts the node informer's talk with the API server for Stats: full
// lists of the Nodes (plain lists and watches that start with every Node), lists
// after the first (an expired watch, the API server restarted), and lists and watches
// that failed or had an error event. It and spreads re-lists: a re-list, after the first
// successful one, waits a random part of spread first, so that the daemons of a
// cluster do not list all at once when the API server comes back. Failed lists are
// retried by client-go's reflector with exponential backoff and jitter.
type listStats struct {
	lists, relists, errs atomic.Uint64
	spread               time.Duration
	rand                 func(n int64) int64 // [0, n)
	pages, items         int                 // of the list under way, for its log line
}

func (s *listStats) stats() lease.Stats {
	return lease.Stats{Source: lease.SourceKube, NodeLists: s.lists.Load(), Resyncs: s.relists.Load(), WatchErrors: s.errs.Load()}
}

// beforeList waits before a re-list; it returns ctx's error if ctx ends first.
func (s *listStats) beforeList(ctx context.Context) error {
	if s.lists.Load() == 0 || s.spread <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(s.rand(int64(s.spread)))):
		return nil
	}
}

func (s *listStats) listed() {
	if s.lists.Add(1) > 1 {
		s.relists.Add(1)
	}
}

// trackedNodes lists and watches nodes for the informer, and tells contact and stats
// about it.
type trackedNodes struct {
	nodes nodeAPI
	c     *contact
	st    *listStats
	log   *zap.Logger
}

var _ cache.ListerWatcherWithContext = trackedNodes{}
var _ cache.ListerWatcher = trackedNodes{}

func (t trackedNodes) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	if o.Continue == "" {
		if err := t.st.beforeList(ctx); err != nil {
			return nil, err
		}
		t.st.pages, t.st.items = 0, 0 // one list at a time: the reflector's
	}
	l, err := t.nodes.List(ctx, o)
	if err != nil {
		t.st.errs.Add(1)
		t.c.failed(fmt.Errorf("list nodes: %w", err))
		return nil, err
	}
	t.st.pages++
	t.st.items += len(l.Items)
	if l.Continue == "" {
		t.listed("list", o, t.st.pages, t.st.items)
	}
	t.c.heard()
	return l, nil
}

// listed counts a complete list of the Nodes and logs it.
func (t trackedNodes) listed(how string, o metav1.ListOptions, pages, items int) {
	t.st.listed()
	st := t.st.stats()
	t.log.Info("listed the Nodes", zap.String("how", how), zap.Int("nodes", items), zap.Int("pages", pages),
		zap.String("from-resource-version", o.ResourceVersion), zap.Uint64("lists", st.NodeLists),
		zap.Uint64("watch-errors", st.WatchErrors))
}

func (t trackedNodes) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	initial := o.SendInitialEvents != nil && *o.SendInitialEvents // a watch-list: a list by other means
	if initial {
		if err := t.st.beforeList(ctx); err != nil {
			return nil, err
		}
	}
	w, err := t.nodes.Watch(ctx, o)
	if err != nil {
		t.st.errs.Add(1)
		t.c.failed(fmt.Errorf("watch nodes: %w", err))
		return nil, err
	}
	t.c.heard()
	tw := &trackedWatch{in: w, out: make(chan watch.Event), stop: make(chan struct{}), done: make(chan struct{}),
		c: t.c, st: t.st, log: t.log}
	if initial {
		tw.listed = func(items int) { t.listed("watch-list", o, 1, items) }
	}
	go func() {
		defer close(tw.done)
		tw.run()
	}()
	return tw, nil
}

func (t trackedNodes) List(o metav1.ListOptions) (runtime.Object, error) {
	return t.ListWithContext(context.Background(), o)
}

func (t trackedNodes) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return t.WatchWithContext(context.Background(), o)
}

// trackedWatch passes a watch's events on and counts each as contact. Stop returns
// once run has returned, so the informer's Run (which stops its watch before it
// returns) leaves no goroutine of it behind.
type trackedWatch struct {
	in   watch.Interface
	out  chan watch.Event
	stop chan struct{}
	done chan struct{} // closed once run has returned
	once sync.Once
	c    *contact
	st   *listStats
	log  *zap.Logger
	// listed, on a watch-list, counts it as a list once its initial events are over
	// (initial of them).
	listed  func(items int)
	initial int
}

func (w *trackedWatch) run() {
	defer close(w.out)
	for {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-w.in.ResultChan():
		case <-w.stop:
			return
		}
		if !ok {
			return
		}
		switch ev.Type {
		case watch.Error:
			err := apierrors.FromObject(ev.Object)
			w.st.errs.Add(1)
			w.c.failed(fmt.Errorf("watch nodes: %w", err))
			w.log.Debug("node watch error", zap.Error(err))
		case watch.Added:
			w.initial++
			w.c.heard()
		case watch.Bookmark:
			if a, err := meta.Accessor(ev.Object); err == nil && w.listed != nil &&
				a.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				w.listed(w.initial) // a watch-list's initial events are over
				w.listed = nil
			}
			w.c.heard()
		default:
			w.c.heard()
		}
		select {
		case w.out <- ev:
		case <-w.stop:
			return
		}
	}
}

func (w *trackedWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.in.Stop()
	})
	<-w.done
}

func (w *trackedWatch) ResultChan() <-chan watch.Event { return w.out }
