package main

import (
	"context"
	"fmt"
	"net/netip"

	"go.uber.org/zap"

	"github.com/weftnet/weft/firewall"
	"github.com/weftnet/weft/lease"
)

// setupFirewall writes the forward rules (--iptables-forward-rules) and the masquerade rules
// (--ip-masq) with iptables, or with nftables when the network config sets
// EnableNFTables, and keeps the firewall in d.fw for the resync.
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
	// The IPv4 rules; an IPv6-only network has none (IPv6 rules: issue 14's firewall work).
	if !cfg.EnableIPv4 {
		d.log.Warn("IPv6-only network: no IPv4 forward or masquerade rules to write")
		return nil
	}
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
	// A host switched from flanneld: its chains go once ours are in place (never a
	// moment without accept rules), so no rule is there twice.
	if err := firewall.TakeOver(ctx, firewall.Options{Log: d.log}); err != nil {
		d.log.Warn("could not remove flanneld's firewall rules", zap.Error(err))
	}
	return nil
}
