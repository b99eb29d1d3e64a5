package kernel_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"
	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// watchFrame is how the kernel watch shows in a goroutine's stack.
const watchFrame = "kernel.(*Peers).watchKernel("

// goroutinesIn returns the stacks of the goroutines that have fn in theirs.
func goroutinesIn(fn string) []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte(fn)) {
			out = append(out, string(g))
		}
	}
	return out
}

// TestKernelRunWaitsForWatch: Run of a kernel backend returns only once the netlink
// watch it started has returned, even a watch slow to end (held up here by a hook),
// so weftd leaves no goroutine of the backend behind at shutdown.
func TestKernelRunWaitsForWatch(t *testing.T) {
	for _, typ := range []string{"vxlan", "host-gw"} {
		t.Run(typ, func(t *testing.T) {
			l := newKernelLab(t, typ, zaptest.NewLogger(t))
			l.k.SetPeriod(time.Hour)
			l.k.SetWatchReturning(func() { time.Sleep(300 * time.Millisecond) })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ran := make(chan error, 1)
			go func() { ran <- l.ns.Do(func() error { return l.be.Run(ctx) }) }()
			testenv.Eventually(t, 5*time.Second, func() error {
				if len(goroutinesIn(watchFrame)) == 0 {
					return fmt.Errorf("no goroutine runs %s yet", watchFrame)
				}
				return nil
			})
			cancel()
			select {
			case err := <-ran:
				if err != nil {
					t.Fatalf("run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return 10s after its context ended")
			}
			if left := goroutinesIn(watchFrame); len(left) > 0 {
				t.Fatalf("Run returned with the kernel watch still running:\n%s", left[0])
			}
		})
	}
}

// TestKernelWatchRepairs: with the periodic full pass an hour away, a peer's route,
// neighbour and fdb entry deleted by hand come back through the netlink watch alone,
// and count as repairs; a peer whose lease goes takes its entries without a full pass.
func TestKernelWatchRepairs(t *testing.T) {
	l := newKernelLab(t, "vxlan", zaptest.NewLogger(t))
	watchIn(t, l.be, l.ns.Name)
	ctx := l.runQuiet(t)
	peers := map[netip.Prefix]lease.Lease{}
	var events []lease.Event
	for i := range 20 {
		p := applyPeer("vxlan", i, i, fmt.Sprintf("192.0.2.%d", 100+i))
		peers[p.Subnet] = p
		events = append(events, lease.Event{Type: lease.Added, Lease: p})
	}
	l.be.HandleEvents(ctx, events)
	l.waitKernel(t, peers)
	fulls := l.stat("full_reconciles")

	p := applyPeer("vxlan", 5, 5, "192.0.2.105")
	for _, cmd := range [][]string{
		{"ip", "route", "del", p.Subnet.String()},
		{"ip", "neigh", "del", p.Subnet.Addr().String(), "dev", "flannel.1"},
		{"bridge", "fdb", "del", "0e:00:00:00:00:05", "dev", "flannel.1", "dst", "192.0.2.105"},
	} {
		if out, err := l.ns.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatalf("%v: %v: %s", cmd, err, out)
		}
	}
	l.waitKernel(t, peers)
	testenv.Eventually(t, 10*time.Second, func() error {
		if r := l.k.Report().Repairs; r["route"] < 1 || r["neigh"] < 1 || r["fdb"] < 1 {
			return fmt.Errorf("repairs %v, want route, neigh and fdb", r)
		}
		return nil
	})
	if l.stat("full_reconciles") == fulls {
		t.Fatal("no full pass after the deletions")
	}

	fulls = l.stat("full_reconciles")
	gone := applyPeer("vxlan", 7, 7, "192.0.2.107")
	delete(peers, gone.Subnet)
	l.be.HandleEvents(ctx, []lease.Event{{Type: lease.Removed, Lease: gone}})
	l.waitKernel(t, peers)
	if f := l.stat("full_reconciles"); f != fulls {
		t.Fatalf("a lease gone took %d full passes; its own deletions must not ask for one", f-fulls)
	}
}

// watchIn makes a kernel backend's netlink watch subscribe in the namespace named ns
// (the goroutine it runs on is not in the namespace Run was called in).
func watchIn(t testing.TB, be encap.Backend, ns string) {
	t.Helper()
	k := peersOf(be)
	if k == nil {
		return
	}
	h, err := vnetns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	k.SetWatchNS(&h)
}
