package firewall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"

	"go.uber.org/zap"
)

// probeChain is the scratch nat chain the --random-fully probe writes and deletes.
const probeChain = "WEFT-PROBE"

// IPTables keeps weft's rules in chains of its own (MasqChain in nat, ForwardChain in
// filter), each written whole with iptables-restore and jumped to from the end of
// POSTROUTING and FORWARD, where flanneld puts its jumps: tools that insert their own
// chains first (Calico's policy, kube-proxy) keep seeing packets before weft accepts them.
type IPTables struct {
	iptables, restore string
	v6                bool // ip6tables
	mode              IPTablesMode
	opts              Options

	mu     sync.Mutex
	random *bool                 // probe result, once probed
	sets   map[string]*ruleSet   // by chain: what was set
	seen   map[string]chainState // by chain: as iptables listed it after writing
}

// NewIPTables finds iptables and iptables-restore of opts.IPTablesMode
// (iptables-legacy and iptables-legacy-restore, say).
func NewIPTables(opts Options) (*IPTables, error) { return newIPTables(opts, false) }

// NewIP6Tables finds ip6tables and ip6tables-restore: the same chains for IPv6.
func NewIP6Tables(opts Options) (*IPTables, error) { return newIPTables(opts, true) }

func newIPTables(opts Options, v6 bool) (*IPTables, error) {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	base := "iptables"
	if v6 {
		base = "ip6tables"
	}
	name, restoreName := opts.IPTablesMode.command(base, ""), opts.IPTablesMode.command(base, "-restore")
	ipt, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, ErrNoTool)
	}
	restore, err := exec.LookPath(restoreName)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", restoreName, ErrNoTool)
	}
	return &IPTables{iptables: ipt, restore: restore, v6: v6, mode: opts.IPTablesMode, opts: opts,
		sets: map[string]*ruleSet{}, seen: map[string]chainState{}}, nil
}

// Backend is part of Firewall: iptables-legacy, iptables-nft or iptables (plain).
func (t *IPTables) Backend() string { return t.mode.String() }

// Mode is the backend the rules are written with.
func (t *IPTables) Mode() IPTablesMode { return t.mode }

// command is the program t runs, named as its mode calls it (iptables-legacy), for logs.
func (t *IPTables) command() string {
	if t.v6 {
		return t.mode.command("ip6tables", "")
	}
	return t.mode.command("iptables", "")
}

// Name is part of Firewall: "iptables" or "ip6tables".
func (t *IPTables) Name() string {
	if t.v6 {
		return "ip6tables"
	}
	return "iptables"
}

// SetMasq is part of Firewall.
func (t *IPTables) SetMasq(ctx context.Context, network, subnet netip.Prefix) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.write(ctx, masqRules(network, subnet, t.fullyRandom(ctx)))
}

// SetForward is part of Firewall.
func (t *IPTables) SetForward(ctx context.Context, network netip.Prefix) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.write(ctx, forwardRules(network))
}

// Repair is part of Firewall: one `iptables -S` per table when all is well.
func (t *IPTables) Repair(ctx context.Context) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	repaired := false
	for _, chain := range []string{MasqChain, ForwardChain} {
		s := t.sets[chain]
		if s == nil {
			continue
		}
		listing, err := t.list(ctx, s.table)
		if err != nil {
			return repaired, err
		}
		if s.state(listing).same(t.seen[chain]) {
			continue
		}
		if err := t.write(ctx, s); err != nil {
			return repaired, err
		}
		repaired = true
	}
	return repaired, nil
}

// Remove is part of Firewall: it deletes both chains and the jumps to them (and the
// forward rules older weftd appended straight to FORWARD).
func (t *IPTables) Remove(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, err := t.removeSets(ctx, []*ruleSet{masqSet(), forwardSet()})
	t.sets, t.seen = map[string]*ruleSet{}, map[string]chainState{}
	return err
}

// removeSets deletes each set's chain and the jumps to it, where they exist (t.mu
// held); it reports whether it removed anything.
func (t *IPTables) removeSets(ctx context.Context, sets []*ruleSet) (bool, error) {
	var errs []error
	removed := false
	for _, s := range sets {
		if !t.tableExists(s.table) {
			continue // nothing of anyone's there; listing it would create it
		}
		listing, err := t.list(ctx, s.table)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st := s.state(listing)
		if !st.exists && len(st.hooks) == 0 {
			continue
		}
		if err := t.apply(ctx, s.removeInput(st.hooks, st.exists)); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", s.chain, err))
			continue
		}
		removed = true
	}
	return removed, errors.Join(errs...)
}

// write replaces the set's chain and jump in one iptables-restore transaction and
// records how iptables lists the result, for Repair to compare against.
func (t *IPTables) write(ctx context.Context, s *ruleSet) error {
	listing, err := t.list(ctx, s.table)
	if err != nil {
		return err
	}
	if err := t.apply(ctx, s.restoreInput(s.state(listing).hooks)); err != nil {
		return fmt.Errorf("write %s: %w", s.chain, err)
	}
	if listing, err = t.list(ctx, s.table); err != nil {
		return err
	}
	t.sets[s.chain], t.seen[s.chain] = s, s.state(listing)
	return nil
}

// tableExists reports whether the table can hold rules already. Legacy iptables
// creates a table in the kernel when a command names it, so a removal that lists a
// legacy table the host never used would leave an empty one behind (and nft's iptables
// then warns "iptables-legacy tables present" on every call). The kernel names the
// legacy tables it holds in /proc/net/ip_tables_names (ip6_tables_names); nft's
// iptables creates nothing by listing, so its tables always count as there.
func (t *IPTables) tableExists(table string) bool {
	if t.mode != IPTablesLegacy && (t.mode != IPTablesPlain || plainMode() != IPTablesLegacy) {
		return true
	}
	names := "/proc/thread-self/net/ip_tables_names" // this thread's namespace
	if t.v6 {
		names = "/proc/thread-self/net/ip6_tables_names"
	}
	data, err := os.ReadFile(names)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist) // no x_tables at all: no legacy table
	}
	return slices.Contains(strings.Fields(string(data)), table)
}

func (t *IPTables) list(ctx context.Context, table string) (string, error) {
	out, err := exec.CommandContext(ctx, t.iptables, "-w", "5", "-t", table, "-S").Output()
	if err != nil {
		return "", fmt.Errorf("%s -t %s -S: %w", t.command(), table, exitError(err))
	}
	return string(out), nil
}

func (t *IPTables) apply(ctx context.Context, input []byte) error {
	cmd := exec.CommandContext(ctx, t.restore, "-w", "5", "--noflush")
	cmd.Stdin = bytes.NewReader(input)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s-restore: %w: %s", t.command(), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// fullyRandom reports whether masquerading gets --random-fully: asked for, and
// supported by iptables (1.6.2 or later) and by the kernel (a MASQUERADE
// --random-fully rule is accepted in a scratch chain). Probed once.
func (t *IPTables) fullyRandom(ctx context.Context) bool {
	if !t.opts.FullyRandom {
		return false
	}
	if t.random == nil {
		err := t.ProbeRandomFully(ctx)
		if err != nil {
			t.opts.Log.Warn("masquerading without --random-fully", zap.Error(err))
		}
		ok := err == nil
		t.random = &ok
	}
	return *t.random
}

// ErrNoRandomFully is wrapped when masquerading with fully random ports is not
// available.
var ErrNoRandomFully = errors.New("--random-fully not supported")

// ProbeRandomFully checks that iptables and the kernel support MASQUERADE
// --random-fully; the error says which does not.
func (t *IPTables) ProbeRandomFully(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, t.iptables, "--version").Output()
	if err != nil {
		return fmt.Errorf("%w: %s --version: %w", ErrNoRandomFully, t.Name(), exitError(err))
	}
	v, err := parseToolVersion(t.Name(), string(out))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoRandomFully, err)
	}
	if !randomFullyVersion(v) {
		return fmt.Errorf("%w by %s v%d.%d.%d (needs 1.6.2)", ErrNoRandomFully, t.Name(), v[0], v[1], v[2])
	}
	add := fmt.Sprintf("*nat\n:%s - [0:0]\n-A %s -j MASQUERADE --random-fully\nCOMMIT\n", probeChain, probeChain)
	addErr := t.apply(ctx, []byte(add))
	if listing, err := t.list(ctx, "nat"); err == nil && strings.Contains(listing, "-N "+probeChain+"\n") {
		del := fmt.Sprintf("*nat\n-F %s\n-X %s\nCOMMIT\n", probeChain, probeChain)
		if err := t.apply(ctx, []byte(del)); err != nil {
			t.opts.Log.Warn("could not delete the probe chain", zap.String("chain", probeChain), zap.Error(err))
		}
	}
	if addErr != nil {
		return fmt.Errorf("%w by the kernel: %w", ErrNoRandomFully, addErr)
	}
	return nil
}

// forwardDrops reports whether the filter table's FORWARD policy is DROP.
func (t *IPTables) forwardDrops(ctx context.Context) bool {
	if !t.tableExists("filter") {
		return false // no legacy filter table: nothing there drops
	}
	out, err := exec.CommandContext(ctx, t.iptables, "-w", "5", "-S", "FORWARD").Output()
	return err == nil && strings.Contains(string(out), "-P FORWARD DROP\n")
}

// exitError adds a failed command's stderr to its error.
func exitError(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}
