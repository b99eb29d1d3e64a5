package nlwatch

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/bench/netnstest"
)

// TestWatchSeesUpdates: subscribed in a namespace, a veth made there and given an
// address and a route shows as link, address and route updates, nothing of weftd's
// namespace does, and Close returns.
func TestWatchSeesUpdates(t *testing.T) {
	ns := netnstest.New(t, "weft-nlw")
	h, err := vnetns.GetFromName(ns.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var errs []error
	w, err := Subscribe(Options{Routes: true, Neighs: true, Links: true, Addrs: true, Namespace: &h,
		OnError: func(err error) { errs = append(errs, err) }, AllOrNothing: true})
	if err != nil {
		t.Fatalf("subscribe: %v (%v)", err, errs)
	}
	closed := make(chan struct{})
	defer func() {
		go func() { w.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Error("Close did not return in 10 s")
		}
	}()
	ctx := context.Background()
	for _, cmd := range [][]string{
		{"ip", "link", "add", "nlw0", "type", "veth", "peer", "name", "nlw1"},
		{"ip", "link", "set", "nlw0", "up"},
		{"ip", "link", "set", "nlw1", "up"},
		{"ip", "addr", "add", "192.0.2.10/24", "dev", "nlw0"},
		{"ip", "route", "add", "198.18.9.0/24", "via", "192.0.2.20", "dev", "nlw0"},
	} {
		if out, err := ns.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatalf("%v: %v: %s", cmd, err, out)
		}
	}
	var link, addr, route bool
	deadline := time.After(10 * time.Second)
	for !link || !addr || !route {
		select {
		case u := <-w.Links:
			link = link || u.Attrs() != nil && u.Attrs().Name == "nlw0" && u.Header.Type == unix.RTM_NEWLINK
		case u := <-w.Addrs:
			addr = addr || u.NewAddr && u.LinkAddress.String() == "192.0.2.10/24"
		case u := <-w.Routes:
			route = route || u.Type == unix.RTM_NEWROUTE && u.Dst != nil && u.Dst.String() == "198.18.9.0/24"
		case <-w.Neighs:
		case <-deadline:
			t.Fatalf("after 10 s: link %v, address %v, route %v seen", link, addr, route)
		}
	}
}

// TestSubscribeFails: in a namespace that cannot be entered, AllOrNothing stops at
// the first kind (one error, no channel), and without it every kind is tried and
// left out.
func TestSubscribeFails(t *testing.T) {
	bad := vnetns.NsHandle(1 << 20) // no such file descriptor: setns fails

	for _, c := range []struct {
		all      bool
		onErrors int
	}{{true, 1}, {false, 4}} {
		t.Run(fmt.Sprintf("AllOrNothing=%v", c.all), func(t *testing.T) {
			var errs []error
			w, err := Subscribe(Options{Routes: true, Neighs: true, Links: true, Addrs: true, Namespace: &bad,
				OnError: func(err error) { errs = append(errs, err) }, AllOrNothing: c.all})
			t.Cleanup(w.Close)
			if err == nil || len(errs) == 0 || !errors.Is(err, errs[0]) {
				t.Fatalf("error %v, want the first of %v wrapped", err, errs)
			}
			if len(errs) != c.onErrors {
				t.Fatalf("OnError told of %d errors (%v), want %d", len(errs), errs, c.onErrors)
			}
			if w.Routes != nil || w.Neighs != nil || w.Links != nil || w.Addrs != nil {
				t.Fatal("a failed subscription has a channel")
			}
		})
	}
}
