package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
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

// trackedNodes lists and watches nodes for the informer, and tells contact about it.
type trackedNodes struct {
	nodes corev1client.NodeInterface
	c     *contact
}

var _ cache.ListerWatcherWithContext = trackedNodes{}
var _ cache.ListerWatcher = trackedNodes{}

func (t trackedNodes) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	l, err := t.nodes.List(ctx, o)
	if err != nil {
		t.c.failed(fmt.Errorf("list nodes: %w", err))
		return nil, err
	}
	t.c.heard()
	return l, nil
}

func (t trackedNodes) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	w, err := t.nodes.Watch(ctx, o)
	if err != nil {
		t.c.failed(fmt.Errorf("watch nodes: %w", err))
		return nil, err
	}
	t.c.heard()
	tw := &trackedWatch{in: w, out: make(chan watch.Event), stop: make(chan struct{}), done: make(chan struct{}), c: t.c}
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
		if ev.Type == watch.Error {
			w.c.failed(fmt.Errorf("watch nodes: %w", apierrors.FromObject(ev.Object)))
		} else {
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
