package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/firewall"
	"github.com/weftnet/weft/lease"
)

// setupFirewall writes the forward rules (--iptables-forward-rules) and the masquerade rules
// (--ip-masq) with iptables, or with nftables when the network config sets
// EnableNFTables, and keeps the firewall in d.fw for the resync and the shutdown.
func (d *daemon) setupFirewall(ctx context.Context, cfg *lease.Config, subnet netip.Prefix) error {
	if !d.opts.ipMasq && !d.opts.iptablesForwardRules {
		return nil
	}
	fw, err := firewall.New(ctx, cfg.EnableNFTables, firewall.Options{FullyRandom: !d.opts.ipMasqNotRandom, Log: d.log})
	if err != nil {
		return fmt.Errorf("--ip-masq/--iptables-forward-rules: %w (install it or pass --iptables-forward-rules=false)", err)
	}
	d.log.Info("firewall rules", zap.String("firewall", fw.Name()), zap.Bool("forward", d.opts.iptablesForwardRules), zap.Bool("ip-masq", d.opts.ipMasq))
	d.fw = fw
	if d.opts.iptablesForwardRules {
		if err := fw.SetForward(ctx, cfg.Network); err != nil {
			return fmt.Errorf("--iptables-forward-rules: %w", err)
		}
	}
	if d.opts.ipMasq {
		if err := fw.SetMasq(ctx, cfg.Network, subnet); err != nil {
			return fmt.Errorf("--ip-masq: %w", err)
		}
	}
	return nil
}

// removeFirewall deletes weft's rules when weftd stops (ctx is done by then, so it
// gets its own deadline).
func (d *daemon) removeFirewall() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.fw.Remove(ctx); err != nil {
		d.log.Warn("could not remove the firewall rules", zap.String("firewall", d.fw.Name()), zap.Error(err))
		return
	}
	d.log.Info("firewall rules removed", zap.String("firewall", d.fw.Name()))
}
