// Package nlwatch subscribes to rtnetlink's link, address, route and neighbour
// updates and lets go of the subscriptions cleanly: the one place weft sets up and
// drains netlink subscriptions (the kernel backends' watch, the wireguard backend's
// repairs, weftd's following of the external interface).
package nlwatch

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Options says what to subscribe to and how.
type Options struct {
	// Routes, Neighs, Links and Addrs ask for the updates of each kind.
	Routes, Neighs, Links, Addrs bool
	// Namespace, when set, is the network namespace to subscribe in (default: the one
	// of the calling thread).
	Namespace *netns.NsHandle
	// OnError is told of every error: a subscription that could not be made, and
	// what netlink's receivers meet (after which they close their channel).
	OnError func(error)
	// AllOrNothing stops at the first subscription that fails: Subscribe returns its
	// error and subscribes to no more kinds. Without it a kind whose subscription
	// fails is left out (its channel nil) and the others are still made.
	AllOrNothing bool
}

// Watch is a set of subscriptions. A kind not asked for, or whose subscription
// failed, has a nil channel (a receive from it blocks forever, so a select leaves it
// out). netlink closes a channel when its subscription ends (a receive error such as
// an overflow); Close ends the others.
type Watch struct {
	Routes <-chan netlink.RouteUpdate
	Neighs <-chan netlink.NeighUpdate
	Links  <-chan netlink.LinkUpdate
	Addrs  <-chan netlink.AddrUpdate

	done   chan struct{}
	routes chan netlink.RouteUpdate
	neighs chan netlink.NeighUpdate
	links  chan netlink.LinkUpdate
	addrs  chan netlink.AddrUpdate
}

// Subscribe makes the subscriptions o asks for, in the order routes, neighbours,
// links, addresses. It always returns a Watch to Close, also with an error (which
// each failure was also given to OnError).
func Subscribe(o Options) (*Watch, error) {
	onErr := o.OnError
	if onErr == nil {
		onErr = func(error) {}
	}
	w := &Watch{done: make(chan struct{})}
	var first error
	fail := func(kind string, err error) bool {
		onErr(err)
		if first == nil {
			first = fmt.Errorf("subscribe to %s: %w", kind, err)
		}
		return o.AllOrNothing
	}
	if o.Routes {
		ch := make(chan netlink.RouteUpdate, 64)
		err := netlink.RouteSubscribeWithOptions(ch, w.done, netlink.RouteSubscribeOptions{Namespace: o.Namespace, ErrorCallback: onErr})
		if err == nil {
			w.routes, w.Routes = ch, ch
		} else if fail("routes", err) {
			return w, first
		}
	}
	if o.Neighs {
		ch := make(chan netlink.NeighUpdate, 64)
		err := netlink.NeighSubscribeWithOptions(ch, w.done, netlink.NeighSubscribeOptions{Namespace: o.Namespace, ErrorCallback: onErr})
		if err == nil {
			w.neighs, w.Neighs = ch, ch
		} else if fail("neighbours", err) {
			return w, first
		}
	}
	if o.Links {
		ch := make(chan netlink.LinkUpdate, 16)
		err := netlink.LinkSubscribeWithOptions(ch, w.done, netlink.LinkSubscribeOptions{Namespace: o.Namespace, ErrorCallback: onErr})
		if err == nil {
			w.links, w.Links = ch, ch
		} else if fail("links", err) {
			return w, first
		}
	}
	if o.Addrs {
		ch := make(chan netlink.AddrUpdate, 16)
		err := netlink.AddrSubscribeWithOptions(ch, w.done, netlink.AddrSubscribeOptions{Namespace: o.Namespace, ErrorCallback: onErr})
		if err == nil {
			w.addrs, w.Addrs = ch, ch
		} else if fail("addresses", err) {
			return w, first
		}
	}
	return w, first
}

// Close ends the subscriptions and returns once netlink's goroutines that fed them
// have closed their channels. Closing done closes the sockets; each receiver then
// closes its channel, and draining them lets a receiver blocked on a send get there.
func (w *Watch) Close() {
	close(w.done)
	drain(w.routes)
	drain(w.neighs)
	drain(w.links)
	drain(w.addrs)
}

// drain receives from ch until it is closed; a nil ch is none.
func drain[T any](ch chan T) {
	if ch == nil {
		return
	}
	for range ch {
	}
}
