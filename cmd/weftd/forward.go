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
			check := append([]string{"-w", "5", "-C", "FORWARD"}, r...)
			if exec.CommandContext(ctx, bin, check...).Run() == nil {
				continue
			}
			add := append([]string{"-w", "5", "-A", "FORWARD"}, r...)
			if out, err := exec.CommandContext(ctx, bin, add...).CombinedOutput(); err != nil {
				return fmt.Errorf("iptables %s: %w: %s", strings.Join(add, " "), err, strings.TrimSpace(string(out)))
			}
		}
		return nil
	}
	if err := ensure(); err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(time.Duration(d.opts.iptablesResync) * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := ensure(); err != nil && ctx.Err() == nil {
					d.log.Warn("forward rules", zap.Error(err))
				}
			}
		}
	}()
	return nil
}
