package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

// errNoIptables is returned when forward rules are asked for and iptables is missing.
var errNoIptables = errors.New("iptables not found")

// forwardRules makes the FORWARD chain accept traffic from and to the overlay network
// (--iptables-forward-rules, on by default as in flanneld: Docker sets the FORWARD
// policy to DROP) and re-checks them every --iptables-resync seconds.
func (d *daemon) forwardRules(ctx context.Context, cfg *lease.Config) error {
	if !d.opts.iptablesForwardRules {
		return nil
	}
	bin, err := exec.LookPath("iptables")
	if err != nil {
		return fmt.Errorf("--iptables-forward-rules: %w (install iptables or pass --iptables-forward-rules=false)", errNoIptables)
	}
	rules := [][]string{
		{"-s", cfg.Network.String(), "-m", "comment", "--comment", "weft forward", "-j", "ACCEPT"},
		{"-d", cfg.Network.String(), "-m", "comment", "--comment", "weft forward", "-j", "ACCEPT"},
	}
	ensure := func() error {
		for _, r := range rules {
			if err := ensureRule(ctx, bin, "filter", "FORWARD", r); err != nil {
				return err
			}
		}
		return nil
	}
	if err := ensure(); err != nil {
		return err
	}
	go every(ctx, time.Duration(d.opts.iptablesResync)*time.Second, func() {
		for _, r := range rules {
			if !ruleExists(ctx, bin, "filter", "FORWARD", r) {
				d.fwdRepairs.Add(1)
				break
			}
		}
		if err := ensure(); err != nil && ctx.Err() == nil {
			d.log.Warn("forward rules", zap.Error(err))
		}
	})
	return nil
}

// ruleExists reports whether rule is in chain of table.
func ruleExists(ctx context.Context, iptables, table, chain string, rule []string) bool {
	check := append([]string{"-w", "5", "-t", table, "-C", chain}, rule...)
	return exec.CommandContext(ctx, iptables, check...).Run() == nil
}

// ensureRule appends rule to chain of table unless it is there already.
func ensureRule(ctx context.Context, iptables, table, chain string, rule []string) error {
	if ruleExists(ctx, iptables, table, chain, rule) {
		return nil
	}
	add := append([]string{"-w", "5", "-t", table, "-A", chain}, rule...)
	if out, err := exec.CommandContext(ctx, iptables, add...).CombinedOutput(); err != nil {
		return fmt.Errorf("iptables %s: %w: %s", strings.Join(add, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// every calls f every period until ctx ends.
func every(ctx context.Context, period time.Duration, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
