package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"sync"

	"go.uber.org/zap"
)

// masqChain is weft's chain in the nat table; POSTROUTING jumps to it.
const masqChain = "WEFT-POSTRTG"

// kubeProxyMark is the mark kube-proxy sets on packets it masquerades itself.
const kubeProxyMark = "0x4000/0x4000"

// masqRules are the rules of masqChain for a host leasing subnet of network, in order.
// They leave pod-to-pod traffic and traffic from outside to our pods alone, and
// masquerade what leaves the overlay and what the host sends into it, as flanneld's
// --ip-masq does. Multicast is never masqueraded.
func masqRules(network, subnet netip.Prefix, fullyRandom bool) [][]string {
	n, s := network.String(), subnet.String()
	masq := []string{"-j", "MASQUERADE"}
	if fullyRandom {
		masq = append(masq, "--random-fully")
	}
	rule := func(spec ...string) []string {
		return append(spec, "-m", "comment", "--comment", "weft masq")
	}
	return [][]string{
		append(rule("-m", "mark", "--mark", kubeProxyMark), "-j", "RETURN"),
		append(rule("-s", s, "-d", n), "-j", "RETURN"),
		append(rule("-s", n, "-d", s), "-j", "RETURN"),
		append(rule("!", "-s", n, "-d", s), "-j", "RETURN"),
		append(rule("-s", n, "!", "-d", "224.0.0.0/4"), masq...),
		append(rule("!", "-s", n, "-d", n), masq...),
	}
}

// masqJump is the POSTROUTING rule that sends packets through masqChain.
var masqJump = []string{"-m", "comment", "--comment", "weft masq", "-j", masqChain}

// restoreInput renders rules as iptables-restore input that replaces the contents of
// masqChain in one transaction (with --noflush, nothing else is touched).
func restoreInput(rules [][]string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*nat\n:%s - [0:0]\n", masqChain)
	for _, r := range rules {
		b.WriteString("-A " + masqChain)
		for _, a := range r {
			if strings.ContainsAny(a, " \"") {
				a = fmt.Sprintf("%q", a)
			}
			b.WriteString(" " + a)
		}
		b.WriteByte('\n')
	}
	b.WriteString("COMMIT\n")
	return b.Bytes()
}

// masquerader keeps masqChain and the POSTROUTING jump in place for the current
// subnet (--ip-masq). The rules stay when weftd stops, like the rest of the data
// path; a start replaces them whole, so a changed subnet leaves nothing stale.
type masquerader struct {
	iptables, restore string
	network           netip.Prefix
	fullyRandom       bool
	log               *zap.Logger

	mu     sync.Mutex
	subnet netip.Prefix
}

func newMasquerader(network netip.Prefix, fullyRandom bool, log *zap.Logger) (*masquerader, error) {
	ipt, err := exec.LookPath("iptables")
	if err != nil {
		return nil, fmt.Errorf("--ip-masq: %w", errNoIptables)
	}
	restore, err := exec.LookPath("iptables-restore")
	if err != nil {
		return nil, fmt.Errorf("--ip-masq: iptables-restore: %w", errNoIptables)
	}
	return &masquerader{iptables: ipt, restore: restore, network: network, fullyRandom: fullyRandom, log: log}, nil
}

// setSubnet writes the rules for subnet now.
func (m *masquerader) setSubnet(ctx context.Context, subnet netip.Prefix) error {
	m.mu.Lock()
	m.subnet = subnet
	m.mu.Unlock()
	return m.write(ctx, m.rules())
}

func (m *masquerader) rules() [][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return masqRules(m.network, m.subnet, m.fullyRandom)
}

func (m *masquerader) write(ctx context.Context, rules [][]string) error {
	cmd := exec.CommandContext(ctx, m.restore, "-w", "5", "--noflush")
	cmd.Stdin = bytes.NewReader(restoreInput(rules))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore %s: %w: %s", masqChain, err, strings.TrimSpace(string(out)))
	}
	return m.ensureJump(ctx)
}

func (m *masquerader) ensureJump(ctx context.Context) error {
	return ensureRule(ctx, m.iptables, "nat", "POSTROUTING", masqJump)
}

// intact reports whether masqChain holds exactly rules, in any formatting iptables
// prints them.
func (m *masquerader) intact(ctx context.Context, rules [][]string) bool {
	out, err := exec.CommandContext(ctx, m.iptables, "-w", "5", "-t", "nat", "-S", masqChain).Output()
	if err != nil || strings.Count(string(out), "\n-A ") != len(rules) {
		return false
	}
	for _, r := range rules {
		check := append([]string{"-w", "5", "-t", "nat", "-C", masqChain}, r...)
		if exec.CommandContext(ctx, m.iptables, check...).Run() != nil {
			return false
		}
	}
	return true
}

// repair rewrites the rules when they are not as written (deleted or changed by hand),
// and restores the jump to them. It reports whether it rewrote the rules.
func (m *masquerader) repair(ctx context.Context) (rewrote bool) {
	rules := m.rules()
	var err error
	if !m.intact(ctx, rules) {
		m.log.Warn("masquerade rules changed behind our back: rewriting them", zap.String("chain", masqChain))
		err, rewrote = m.write(ctx, rules), true
	} else {
		err = m.ensureJump(ctx)
	}
	if err != nil && ctx.Err() == nil {
		m.log.Warn("masquerade rules", zap.Error(err))
	}
	return rewrote
}
