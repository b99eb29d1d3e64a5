package kernel

import (
	"net/netip"
	"time"

	"github.com/vishvananda/netns"
)

// What the tests in kernel_test (which drive the loop through vxlan and host-gw)
// reach inside Peers.

// SetPeriod sets how often the full pass runs unasked (before Run).
func (k *Peers) SetPeriod(d time.Duration) { k.period = d }

// SetWatchReturning has f called as the kernel watch returns, after it has let go of
// its subscriptions (before Run).
func (k *Peers) SetWatchReturning(f func()) { k.watchReturning = f }

// SetWatchNS makes the kernel watch subscribe in ns (before Run).
func (k *Peers) SetWatchNS(ns *netns.NsHandle) { k.watchNS = ns }

// Repair asks the loop for a full pass.
func (k *Peers) Repair() { k.repair() }

// Full runs the backend's full pass.
func (k *Peers) Full() error { return k.passes.Full() }

// Apply runs the backend's apply pass for changed.
func (k *Peers) Apply(changed []netip.Prefix) error { return k.passes.Apply(changed) }
