package firewall

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"sync"

	"go.uber.org/zap"
	"sigs.k8s.io/knftables"
)

// nftChain is a base chain of weft's table and what it holds.
type nftChain struct {
	chain knftables.Chain
	rules []nftRule
}

func masqChainSpec() knftables.Chain {
	return knftables.Chain{
		Name:     nftMasqChain,
		Comment:  knftables.PtrTo("weft: masquerading (--ip-masq)"),
		Type:     knftables.PtrTo(knftables.NATType),
		Hook:     knftables.PtrTo(knftables.PostroutingHook),
		Priority: knftables.PtrTo(knftables.SNATPriority),
	}
}

func fwdChainSpec() knftables.Chain {
	return knftables.Chain{
		Name:     nftFwdChain,
		Comment:  knftables.PtrTo("weft: accept overlay traffic (--iptables-forward-rules)"),
		Type:     knftables.PtrTo(knftables.FilterType),
		Hook:     knftables.PtrTo(knftables.ForwardHook),
		Priority: knftables.PtrTo(knftables.FilterPriority),
	}
}

// NFTables keeps weft's rules in an nftables table of its own (ip weft; ip6 weft for
// IPv6, as flanneld keeps flannel-ipv4 and flannel-ipv6), written in
// one transaction through the nft command (sigs.k8s.io/knftables), as flanneld does with
// EnableNFTables. Its forward chain accepts overlay traffic, but a drop in another
// table's forward chain (iptables' FORWARD policy DROP, for one) still drops it:
// nftables runs every base chain of a hook and any of them may drop.
type NFTables struct {
	nft    knftables.Interface
	family knftables.Family
	bin    string // the nft command, for listings
	opts   Options

	mu     sync.Mutex
	random *bool
	chains map[string]nftChain // by name: what was set
	seen   string              // the table as nft listed it after the last write
}

// NewNFTables checks that nft is installed and works; its table is ip weft.
func NewNFTables(opts Options) (*NFTables, error) { return newNFTables(opts, knftables.IPv4Family) }

// NewNFTables6 is NewNFTables for IPv6: table ip6 weft.
func NewNFTables6(opts Options) (*NFTables, error) { return newNFTables(opts, knftables.IPv6Family) }

func newNFTables(opts Options, family knftables.Family) (*NFTables, error) {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	bin, err := exec.LookPath("nft")
	if err != nil {
		return nil, fmt.Errorf("nft: %w", ErrNoTool)
	}
	nft, err := knftables.New(family, NFTTable)
	if err != nil {
		return nil, fmt.Errorf("nftables (%s): %w", family, err)
	}
	return &NFTables{nft: nft, family: family, bin: bin, opts: opts, chains: map[string]nftChain{}}, nil
}

// Name is part of Firewall: "nftables" (ip6 weft: "nftables ip6").
// Backend is part of Firewall: "nftables".
func (f *NFTables) Backend() string { return "nftables" }

func (f *NFTables) Name() string {
	if f.family == knftables.IPv6Family {
		return "nftables ip6"
	}
	return "nftables"
}

// SetMasq is part of Firewall.
func (f *NFTables) SetMasq(ctx context.Context, network, subnet netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.write(ctx, nftChain{masqChainSpec(), nftMasqRules(network, subnet, f.fullyRandom(ctx))})
}

// SetForward is part of Firewall.
func (f *NFTables) SetForward(ctx context.Context, network netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.write(ctx, nftChain{fwdChainSpec(), nftForwardRules(network)})
}

// Repair is part of Firewall: one `nft list table` when all is well (compared with
// the listing taken after the last write, counters aside); otherwise the table is
// written again. Deleted, changed and added rules and chains are all caught.
func (f *NFTables) Repair(ctx context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.chains) == 0 {
		return false, nil
	}
	if now, err := f.list(ctx); err == nil && now == f.seen {
		return false, nil
	}
	if err := f.writeAll(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// counters matches the counts nft prints in a rule's counter.
var counters = regexp.MustCompile(`counter packets \d+ bytes \d+`)

// list returns `nft list table ip weft` (or ip6) without the counters' counts.
func (f *NFTables) list(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, f.bin, "list", "table", string(f.family), NFTTable).Output()
	if err != nil {
		return "", fmt.Errorf("nft list table %s %s: %w", f.family, NFTTable, exitError(err))
	}
	return counters.ReplaceAllString(string(out), "counter"), nil
}

// Remove is part of Firewall: it deletes weft's table.
func (f *NFTables) Remove(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.chains, f.seen = map[string]nftChain{}, ""
	tx := f.nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := f.nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
		return fmt.Errorf("nftables: delete table %s %s: %w", f.family, NFTTable, err)
	}
	return nil
}

// write sets one chain's rules and writes the table.
func (f *NFTables) write(ctx context.Context, c nftChain) error {
	f.chains[c.chain.Name] = c
	return f.writeAll(ctx)
}

// writeAll replaces weft's table with the chains set, in one transaction (add, delete
// and make the table again: whatever was changed in it, chains included, is gone), and
// records nft's listing of it for Repair.
func (f *NFTables) writeAll(ctx context.Context) error {
	tx := f.nft.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	f.addTable(tx)
	for _, name := range []string{nftFwdChain, nftMasqChain} {
		if c, ok := f.chains[name]; ok {
			addChain(tx, c)
		}
	}
	if err := f.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("nftables: write table %s %s: %w", f.family, NFTTable, err)
	}
	var err error
	f.seen, err = f.list(ctx)
	return err
}

func (f *NFTables) addTable(tx *knftables.Transaction) {
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("weft: overlay network rules")})
}

// addChain makes the chain and fills it.
func addChain(tx *knftables.Transaction, c nftChain) {
	ch := c.chain
	tx.Add(&ch)
	for _, r := range c.rules {
		tx.Add(&knftables.Rule{Chain: ch.Name, Rule: r.rule, Comment: knftables.PtrTo(r.comment)})
	}
}

func (f *NFTables) fullyRandom(ctx context.Context) bool {
	if !f.opts.FullyRandom {
		return false
	}
	if f.random == nil {
		err := f.ProbeRandomFully(ctx)
		if err != nil {
			f.opts.Log.Warn("masquerading without fully-random", zap.Error(err))
		}
		ok := err == nil
		f.random = &ok
	}
	return *f.random
}

// ProbeRandomFully checks (nft --check: the kernel validates, nothing is committed)
// that a "masquerade fully-random" rule is accepted.
func (f *NFTables) ProbeRandomFully(ctx context.Context) error {
	tx := f.nft.NewTransaction()
	f.addTable(tx)
	probe := masqChainSpec()
	probe.Name, probe.Comment = nftProbeChain, nil
	tx.Add(&probe)
	rule := "ip saddr != 127.0.0.1 masquerade fully-random"
	if f.family == knftables.IPv6Family {
		rule = "ip6 saddr != ::1 masquerade fully-random"
	}
	tx.Add(&knftables.Rule{Chain: nftProbeChain, Rule: rule})
	if err := f.nft.Check(ctx, tx); err != nil {
		return fmt.Errorf("%w by nftables: %w", ErrNoRandomFully, err)
	}
	return nil
}

// removeNFTTables deletes the tables named, where they exist, and returns the ones it
// deleted. Without nft there is nothing to delete.
func removeNFTTables(ctx context.Context, tables []nftTable) ([]nftTable, error) {
	var removed []nftTable
	var errs []error
	for _, t := range tables {
		nft, err := knftables.New(knftables.Family(t.family), t.name)
		if err != nil {
			return removed, nil // no nft, or no nftables in this kernel
		}
		tx := nft.NewTransaction()
		tx.Delete(&knftables.Table{})
		switch err := nft.Run(ctx, tx); {
		case err == nil:
			removed = append(removed, t)
		case !knftables.IsNotFound(err):
			errs = append(errs, fmt.Errorf("nftables: delete table %s: %w", t, err))
		}
	}
	return removed, errors.Join(errs...)
}
