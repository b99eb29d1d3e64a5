package daemon

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
func (d *daemon) setupFirewall(ctx context.Context, cfg *lease.Config, own lease.Lease) error {
	if !d.cfg.IPMasq && !d.cfg.ForwardRules {
		return nil
	}
	fwOpts := firewall.Options{FullyRandom: d.cfg.IPMasqFullyRandom, IPv6: cfg.EnableIPv6, Log: d.log}
	if !cfg.EnableNFTables {
		mode, err := iptablesMode(ctx, d.cfg.IPTablesMode, d.log)
		if err != nil {
			return err
		}
		fwOpts.IPTablesMode = mode
	}
	fw, err := firewall.New(ctx, cfg.EnableNFTables, fwOpts)
	if err != nil {
		return fmt.Errorf("--ip-masq/--iptables-forward-rules: %w (install it or pass --iptables-forward-rules=false)", err)
	}
	d.log.Info("firewall rules", zap.String("firewall", fw.Name()), zap.String("backend", fw.Backend()),
		zap.Bool("forward", d.cfg.ForwardRules), zap.Bool("ip-masq", d.cfg.IPMasq))
	d.fw = fw
	var v6net netip.Prefix
	if cfg.EnableIPv6 {
		v6net = cfg.IPv6Network
	}
	if d.cfg.ForwardRules {
		for _, n := range []netip.Prefix{cfg.Network, v6net} {
			if !n.IsValid() {
				continue
			}
			if err := fw.SetForward(ctx, n); err != nil {
				return fmt.Errorf("--iptables-forward-rules: %w", err)
			}
		}
	}
	if d.cfg.IPMasq {
		if err := d.setMasq(ctx, cfg.Network, v6net, own); err != nil {
			return err
		}
	}
	// A host switched from flanneld: its chains go once ours are in place (never a
	// moment without accept rules), so no rule is there twice.
	if err := firewall.TakeOver(ctx, firewall.Options{Log: d.log}); err != nil {
		d.log.Warn("could not remove flanneld's firewall rules", zap.Error(err))
	}
	return nil
}

// iptablesMode is the iptables backend --iptables-mode asks for: given, or with
// auto the one the host's rules are in (firewall.DetectIPTablesMode), logged with
// what decided it.
func iptablesMode(ctx context.Context, flag string, log *zap.Logger) (firewall.IPTablesMode, error) {
	if flag != "auto" {
		mode, err := firewall.ParseIPTablesMode(flag)
		if err != nil {
			return mode, fmt.Errorf("--iptables-mode: %w", err)
		}
		log.Info("iptables mode given by --iptables-mode", zap.Stringer("backend", mode))
		return mode, nil
	}
	d := firewall.DetectIPTablesMode(ctx)
	log.Info("iptables mode detected", zap.Stringer("backend", d.Mode), zap.String("reason", d.Reason),
		zap.Int("legacy_rules", d.Legacy), zap.Int("nft_rules", d.NFT))
	return d.Mode, nil
}

// setMasq writes the masquerade rules of each family the network has (an invalid
// network: the family is off) for our lease.
func (d *daemon) setMasq(ctx context.Context, network, v6network netip.Prefix, own lease.Lease) error {
	if network.IsValid() && own.Subnet.IsValid() {
		if err := d.fw.SetMasq(ctx, network, own.Subnet); err != nil {
			return fmt.Errorf("--ip-masq: %w", err)
		}
	}
	if v6network.IsValid() && own.IPv6Subnet.IsValid() {
		if err := d.fw.SetMasq(ctx, v6network, own.IPv6Subnet); err != nil {
			return fmt.Errorf("--ip-masq (IPv6): %w", err)
		}
	}
	return nil
}
