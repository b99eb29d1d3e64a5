// Package firewall keeps weftd's packet filter rules on the host: masquerading for
// --ip-masq and accepting forwarded overlay traffic for --iptables-forward-rules. The
// rules live in chains (iptables) or a table (nftables) of weft's own, are written in one
// transaction and put back when someone changes or deletes them. They outlive weftd,
// as flanneld's do; weftd cleanup removes them (RemoveAll).
//
// Both implementations give the rules the meaning flanneld's do:
//
//   - packets kube-proxy marked for masquerading (mark 0x4000/0x4000) are left to it;
//   - pod to pod (our subnet to the network, the network to our subnet) keeps its source;
//   - traffic from outside the network to our pods keeps its source;
//   - pods to outside the network are masqueraded, except multicast (224.0.0.0/4);
//   - the host (any source outside the network) into the network is masqueraded;
//   - masquerading picks source ports fully at random unless that was switched off
//     (--ip-masq-fully-random-disable) or the kernel and tools cannot do it (probed);
//   - forwarded packets from or to the network are accepted.
package firewall

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// Firewall is the part of the host's packet filter weftd owns.
type Firewall interface {
	// SetMasq writes the masquerade rules for a host leasing subnet of network,
	// replacing any written before (a changed subnet leaves nothing stale). New's
	// firewall takes an IPv4 and an IPv6 network alike, one call each.
	SetMasq(ctx context.Context, network, subnet netip.Prefix) error
	// SetForward writes the rules that accept forwarded traffic from and to network.
	SetForward(ctx context.Context, network netip.Prefix) error
	// Repair checks the rules set so far and rewrites them when they were changed or
	// deleted behind weftd's back; it reports whether it had to.
	Repair(ctx context.Context) (repaired bool, err error)
	// Remove deletes everything weft wrote. Removing what is not there is no error.
	Remove(ctx context.Context) error
	// Name names the implementation in logs: "iptables" or "nftables".
	Name() string
	// Backend names what writes the rules: "nftables", or the iptables command of the
	// mode in use ("iptables-legacy", "iptables-nft"; "iptables" for plain iptables).
	Backend() string
}

// Options are the settings both implementations share.
type Options struct {
	// FullyRandom asks for masquerading with fully random source ports; it is used
	// only when the probe finds the kernel and the tools support it.
	FullyRandom bool
	// IPv6 says the network has IPv6 (EnableIPv6): only then does New warn about
	// ip6tables' FORWARD policy.
	IPv6 bool
	// IPTablesMode is the iptables backend the iptables implementation writes with
	// (DetectIPTablesMode finds the host's); IPTablesPlain runs plain iptables.
	IPTablesMode IPTablesMode
	Log          *zap.Logger
}

// ErrNoTool is wrapped when the command an implementation drives is not installed.
var ErrNoTool = errors.New("firewall tool not found")

// New returns the implementation the network config asks for (nft: EnableNFTables)
// for both families: IPv4 (iptables, nftables table ip weft) and, where ip6tables (or
// nftables) is there, IPv6 (the same chains in ip6tables, table ip6 weft). Each
// Set call goes to the family of its network. It removes what weft left in the other
// implementation, so switching between them leaves no stale rules (flanneld does the
// same at start).
func New(ctx context.Context, nft bool, opts Options) (Firewall, error) {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	v4, err := newKind(ctx, nft, false, opts)
	if err != nil {
		return nil, err
	}
	v6, err6 := newKind(ctx, nft, true, opts)
	if err6 != nil {
		opts.Log.Debug("no IPv6 firewall", zap.Error(err6))
		v6 = nil
	}
	return &dual{v4: v4, v6: v6, err6: err6}, nil
}

// newKind is New for one family.
func newKind(ctx context.Context, nft, six bool, opts Options) (Firewall, error) {
	newIPT, newNFT := NewIPTables, NewNFTables
	if six {
		newIPT, newNFT = NewIP6Tables, NewNFTables6
	}
	if nft {
		fw, err := newNFT(opts)
		if err != nil {
			return nil, err
		}
		for _, old := range iptablesBackends(opts, six) {
			if err := old.Remove(ctx); err != nil {
				opts.Log.Warn("could not remove weft's iptables rules", zap.String("firewall", old.command()), zap.Error(err))
			}
			if (!six || opts.IPv6) && old.forwardDrops(ctx) {
				opts.Log.Warn(old.command() + "' FORWARD policy is DROP: weft's nftables accept rules do not override it, " +
					"so forwarded overlay traffic is dropped unless something accepts it there (or use iptables mode)")
			}
		}
		return fw, nil
	}
	fw, err := newIPT(opts)
	if err != nil {
		return nil, err
	}
	if opts.IPTablesMode != IPTablesPlain {
		// What weft wrote with the other backend (an older weftd, or the host
		// changed backends) would be a second, stale set of rules.
		for _, old := range iptablesBackends(opts, six)[1:] {
			if err := old.Remove(ctx); err != nil {
				opts.Log.Warn("could not remove weft's rules of the other iptables backend", zap.String("firewall", old.command()), zap.Error(err))
			}
		}
	}
	if old, err := newNFT(opts); err == nil {
		if err := old.Remove(ctx); err != nil {
			opts.Log.Warn("could not remove weft's nftables table", zap.String("firewall", old.Name()), zap.Error(err))
		}
	}
	return fw, nil
}

// iptablesBackends makes an IPTables of one family for each iptables backend installed:
// opts.IPTablesMode's first, then plain iptables, iptables-legacy and iptables-nft,
// leaving out those that run the same program as one before them (plain iptables is
// most often a link to one of the others).
func iptablesBackends(opts Options, six bool) []*IPTables {
	mk := NewIPTables
	if six {
		mk = NewIP6Tables
	}
	var out []*IPTables
	seen := map[string]bool{}
	for _, m := range []IPTablesMode{opts.IPTablesMode, IPTablesPlain, IPTablesLegacy, IPTablesNFT} {
		o := opts
		o.IPTablesMode = m
		ipt, err := mk(o)
		if err != nil {
			continue
		}
		prog := ipt.iptables
		if p, err := filepath.EvalSymlinks(prog); err == nil {
			prog = p
		}
		if seen[prog] {
			continue
		}
		seen[prog] = true
		out = append(out, ipt)
	}
	return out
}

// RemoveAll deletes what weft wrote with either kind, every iptables backend and either
// family, for a host being cleaned up; a kind whose tools are missing has nothing of
// weft's to remove.
func RemoveAll(ctx context.Context, opts Options) error {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	var errs []error
	for _, six := range []bool{false, true} {
		for _, ipt := range iptablesBackends(opts, six) {
			errs = append(errs, ipt.Remove(ctx))
		}
	}
	for _, mk := range []func(Options) (*NFTables, error){NewNFTables, NewNFTables6} {
		if nft, err := mk(opts); err == nil {
			errs = append(errs, nft.Remove(ctx))
		}
	}
	return errors.Join(errs...)
}

// Resync calls fw.Repair every period until ctx ends, logging what it finds; it
// returns when ctx is done. onRepair, when not nil, is called after each repair.
func Resync(ctx context.Context, fw Firewall, period time.Duration, log *zap.Logger, onRepair func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		repaired, err := fw.Repair(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("firewall rules", zap.String("firewall", fw.Name()), zap.Error(err))
		case repaired:
			log.Warn("firewall rules changed behind our back: rewrote them", zap.String("firewall", fw.Name()))
			if onRepair != nil {
				onRepair()
			}
		}
	}
}
