package firewall

import (
	"context"
	"errors"

	"go.uber.org/zap"
)

// flanneld's iptables chains (v0.28) and the comments on its jumps to them. A host
// switched from flanneld to weftd would otherwise keep both sets of rules: the same
// meaning twice, and flanneld's left to go stale when the config changes.
// flanneld uses the same names in ip6tables.
var flanneldSets = []*ruleSet{
	{table: "nat", hook: "POSTROUTING", chain: "FLANNEL-POSTRTG", comment: "flanneld masq"},
	{table: "filter", hook: "FORWARD", chain: "FLANNEL-FWD", comment: "flanneld forward"},
}

// nftTable names an nftables table: family ("ip", "ip6") and name.
type nftTable struct{ family, name string }

func (t nftTable) String() string { return t.family + " " + t.name }

// flanneldTables are flanneld's nftables tables, for EnableNFTables (it makes both,
// the ip6 one empty on an IPv4-only network).
var flanneldTables = []nftTable{{"ip", "flannel-ipv4"}, {"ip6", "flannel-ipv6"}}

// removeFlanneld deletes flanneld's chains and the jumps to them; what is not there
// is no error. It reports whether it removed anything.
func (t *IPTables) removeFlanneld(ctx context.Context) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.removeSets(ctx, flanneldSets)
}

// TakeOver removes the rules flanneld left on this host (its iptables and ip6tables
// chains FLANNEL-POSTRTG and FLANNEL-FWD with their jumps, in every iptables backend
// installed, and its nftables tables), so a host
// switched from flanneld to weftd carries weft's rules only. Tools that are missing
// have nothing to remove.
func TakeOver(ctx context.Context, opts Options) error {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	var errs []error
	for _, six := range []bool{false, true} {
		for _, ipt := range iptablesBackends(opts, six) {
			removed, err := ipt.removeFlanneld(ctx)
			errs = append(errs, err)
			if removed {
				opts.Log.Info("removed flanneld's chains (FLANNEL-POSTRTG, FLANNEL-FWD)", zap.String("firewall", ipt.command()))
			}
		}
	}
	removed, err := removeNFTTables(ctx, flanneldTables)
	errs = append(errs, err)
	for _, t := range removed {
		opts.Log.Info("removed flanneld's nftables table", zap.Stringer("table", t))
	}
	return errors.Join(errs...)
}
