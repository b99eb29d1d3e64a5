package bench

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/netns"
)

// overtake makes an etcd compaction overtake the daemon's watch, as a daemon cut off
// from etcd for a while meets it: the daemon is stopped (SIGSTOP), Rate lease changes
// are written (half deletes, half adds), etcd is compacted at the revision after them,
// the daemon's TCP connections to etcd are destroyed (ss -K: the events queued for it
// are lost, as over a broken link) and the daemon continues (SIGCONT). Its watch must
// resume from a compacted revision: it has to re-list (weftd's re-lists are counted;
// one is right, more is a loop). Then CPU over the Idle window, when it is idle again,
// and when the data path equals etcd.
func (r *scaleRun) overtake(ctx context.Context, v *daemonView, ns *netns.NS, own netip.Prefix, pt *ScalePoint) error {
	before := v.resyncs()
	pid := v.d.Pid()
	rev, err := r.overtakeStopped(ctx, ns, pid, own, pt)
	if err != nil {
		return err
	}
	back := time.Now()
	r.progress("  %d changes while stopped, compacted at revision %d, connections cut, continued",
		pt.OvertakeChanges, rev)
	var catchUp sync.WaitGroup
	if v.routes != nil {
		catchUp.Add(1)
		go func() {
			defer catchUp.Done()
			if r.caughtUp(ctx, v, own) {
				pt.OvertakeCatchUpS = time.Since(back).Seconds()
			}
		}()
	}
	pt.OvertakeCPUPct, pt.OvertakeSettleS, err = r.cpuUntilIdle(ctx, pid, back, pt.IdleCPUPct)
	catchUp.Wait()
	if err != nil {
		return err
	}
	if after := v.resyncs(); before >= 0 && after >= 0 {
		pt.ResyncsOvertake = after - before
	}
	if v.routes != nil {
		// The catch-up wait above was the chance to settle: compare once.
		if pt.StaleAfterOvertake, pt.MissingAfterOvertake, err = r.drift(ctx, v, own); err != nil {
			return err
		}
	}
	r.progress("  overtaken watch: %v re-lists, data path = etcd after %.2fs, CPU %.2f%% over %s, idle again after %.0fs, stale %d, missing %d",
		pt.ResyncsOvertake, pt.OvertakeCatchUpS, pt.OvertakeCPUPct, r.o.Idle, pt.OvertakeSettleS,
		pt.StaleAfterOvertake, pt.MissingAfterOvertake)
	return nil
}

// overtakeStopped is overtake's part while the daemon pid is stopped: stop it, drop
// what etcd sends it, write the changes, compact, cut its connections to etcd, stop
// dropping and continue it. It returns the revision of the compaction.
func (r *scaleRun) overtakeStopped(ctx context.Context, ns *netns.NS, pid int, own netip.Prefix, pt *ScalePoint) (int64, error) {
	proc, err := os.FindProcess(pid)
	if err != nil {
		return 0, err
	}
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		return 0, fmt.Errorf("scale: stop the daemon: %w", err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = proc.Signal(syscall.SIGCONT)
		}
	}()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(lab.EtcdEndpoint, "http://"))
	unblock, err := blockFrom(ctx, ns, host, port)
	if err != nil {
		return 0, err
	}
	blocked := true
	defer func() {
		if blocked {
			_ = unblock()
		}
	}()
	if err := r.overtakeWrites(ctx, own, pt); err != nil {
		return 0, err
	}
	rev, err := r.compact(ctx)
	if err != nil {
		return 0, err
	}
	if out, err := ns.Run(ctx, "ss", "-K", "-t", "dst", host, "dport", "=", port); err != nil {
		return 0, fmt.Errorf("scale: cut the daemon's etcd connections: %w: %s", err, out)
	}
	if err := unblock(); err != nil {
		return 0, err
	}
	blocked = false
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		return 0, fmt.Errorf("scale: continue the daemon: %w", err)
	}
	stopped = false
	return rev, nil
}

// blockFrom drops, in ns, what host sends from TCP port: what etcd sends a stopped
// daemon must not reach its socket (data queued there would still be read after
// ss -K). An nftables table of the benchmark's own drops it on the way in; unblock
// deletes the table.
func blockFrom(ctx context.Context, ns *netns.NS, host, port string) (unblock func() error, err error) {
	nft := func(args ...string) error {
		if out, err := ns.Run(ctx, "nft", args...); err != nil {
			return fmt.Errorf("scale: nft %v: %w: %s", args, err, out)
		}
		return nil
	}
	unblock = func() error { return nft("delete table inet weftbench") }
	for _, cmd := range []string{"add table inet weftbench",
		"add chain inet weftbench in { type filter hook input priority -10 ; }",
		"add rule inet weftbench in ip saddr " + host + " tcp sport " + port + " drop"} {
		if err := nft(cmd); err != nil {
			_ = unblock()
			return nil, err
		}
	}
	return unblock, nil
}

// overtakeWrites makes Rate lease changes, deletes and adds in turn, counted in
// pt.OvertakeChanges.
func (r *scaleRun) overtakeWrites(ctx context.Context, own netip.Prefix, pt *ScalePoint) error {
	free, simList := r.freeAndLeased(ctx, own)
	for i := range r.o.Rate {
		var err error
		if i%2 == 0 && len(simList) > 0 {
			j := r.rnd.Intn(len(simList))
			p := simList[j]
			simList = append(simList[:j], simList[j+1:]...)
			err = r.dropSim(ctx, p)
		} else {
			j := r.rnd.Intn(len(free))
			p := free[j]
			free = append(free[:j], free[j+1:]...)
			err = r.addSim(ctx, p)
		}
		if err != nil {
			return fmt.Errorf("scale: overtake write: %w", err)
		}
		pt.OvertakeChanges++
	}
	return nil
}

// caughtUp waits up to 30 s for the data path to equal etcd and reports whether it
// did.
func (r *scaleRun) caughtUp(ctx context.Context, v *daemonView, own netip.Prefix) bool {
	var stale, missing int
	_ = poll(ctx, 30*time.Second, 20*time.Millisecond, func() (bool, error) {
		s, m, err := r.drift(ctx, v, own)
		if err != nil {
			return false, err
		}
		stale, missing = s, m
		return stale == 0 && missing == 0, nil
	})
	return stale == 0 && missing == 0
}
