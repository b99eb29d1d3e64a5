package kernel

import (
	"context"
	"net/netip"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Run makes the kernel match the peers until ctx ends: the full pass at once, every
// period and whenever one is asked for (SetOwn, SetExternal, repair); on other kicks,
// the apply pass with the peers changed since the last pass. It returns only once the
// kernel watch it starts has returned.
func (k *Peers) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var watch sync.WaitGroup
	defer watch.Wait()
	defer cancel() // runs first: the watch stops on any return
	watch.Go(func() { k.watchKernel(ctx) })
	t := time.NewTicker(k.period)
	defer t.Stop()
	var last string
	tick := false
	for {
		k.mu.Lock()
		full, changed := k.full || tick, []netip.Prefix(nil)
		if !full {
			changed = make([]netip.Prefix, 0, len(k.dirty))
			for s := range k.dirty {
				changed = append(changed, s)
			}
			sort.Slice(changed, func(i, j int) bool { return changed[i].Addr().Less(changed[j].Addr()) })
		}
		k.full, tick = false, false
		clear(k.dirty)
		k.mu.Unlock()
		var err error
		switch {
		case full:
			k.Count("full_reconciles")
			err = k.passes.Full()
		case len(changed) > 0:
			k.Count("applies")
			err = k.passes.Apply(changed)
		}
		if err != nil {
			if err.Error() != last {
				k.log.Warn("reconciling the kernel data path", zap.Error(err))
			}
			last = err.Error()
		} else {
			last = ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-k.kick:
		case <-t.C:
			tick = true
		}
	}
}

// repair asks for a full reconcile pass soon.
func (k *Peers) repair() {
	k.mu.Lock()
	k.full = true
	k.mu.Unlock()
	k.poke()
}
