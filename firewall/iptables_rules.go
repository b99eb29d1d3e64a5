package firewall

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
)

// Chains and comments of the iptables implementation.
const (
	MasqChain    = "WEFT-POSTRTG" // nat; POSTROUTING jumps to it
	ForwardChain = "WEFT-FWD"     // filter; FORWARD jumps to it
	masqComment  = "weft masq"
	fwdComment   = "weft forward"
)

// kubeProxyMark is the mark kube-proxy sets on packets it masquerades itself.
const kubeProxyMark = "0x4000/0x4000"

// multicast and multicast6 are never masqueraded.
const (
	multicast  = "224.0.0.0/4"
	multicast6 = "ff00::/8"
)

// multicastOf is the multicast range of network's family.
func multicastOf(network netip.Prefix) string {
	if network.Addr().Is6() {
		return multicast6
	}
	return multicast
}

// ruleSet is one chain of weft's and the jump to it from a built-in chain.
type ruleSet struct {
	table, hook, chain, comment string
	rules                       [][]string
}

// jump is the rule in the built-in chain that sends packets through the set's chain.
func (s *ruleSet) jump() []string {
	return []string{"-m", "comment", "--comment", s.comment, "-j", s.chain}
}

// masqRules are the rules of MasqChain for a host leasing subnet of network, in order.
func masqRules(network, subnet netip.Prefix, fullyRandom bool) *ruleSet {
	n, s := network.String(), subnet.String()
	masq := []string{"-j", "MASQUERADE"}
	if fullyRandom {
		masq = append(masq, "--random-fully")
	}
	rule := func(spec ...string) []string {
		return append(spec, "-m", "comment", "--comment", masqComment)
	}
	set := masqSet()
	set.rules = [][]string{
		append(rule("-m", "mark", "--mark", kubeProxyMark), "-j", "RETURN"),
		append(rule("-s", s, "-d", n), "-j", "RETURN"),
		append(rule("-s", n, "-d", s), "-j", "RETURN"),
		append(rule("!", "-s", n, "-d", s), "-j", "RETURN"),
		append(rule("-s", n, "!", "-d", multicastOf(network)), masq...),
		append(rule("!", "-s", n, "-d", n), masq...),
	}
	return set
}

// masqSet and forwardSet are the sets without rules, for finding and removing them.
func masqSet() *ruleSet {
	return &ruleSet{table: "nat", hook: "POSTROUTING", chain: MasqChain, comment: masqComment}
}

func forwardSet() *ruleSet {
	return &ruleSet{table: "filter", hook: "FORWARD", chain: ForwardChain, comment: fwdComment}
}

// forwardRules are the rules of ForwardChain for network.
func forwardRules(network netip.Prefix) *ruleSet {
	n := network.String()
	set := forwardSet()
	set.rules = [][]string{
		{"-s", n, "-m", "comment", "--comment", fwdComment, "-j", "ACCEPT"},
		{"-d", n, "-m", "comment", "--comment", fwdComment, "-j", "ACCEPT"},
	}
	return set
}

// ours reports whether line (as `iptables -S` prints it) is a rule of the hook chain
// that weft wrote: a jump to the set's chain, or a rule carrying its comment (older
// weftd appended its forward rules straight to FORWARD).
func (s *ruleSet) ours(line string) bool {
	if !strings.HasPrefix(line, "-A "+s.hook+" ") {
		return false
	}
	return strings.HasSuffix(line, " -j "+s.chain) || strings.Contains(line, `--comment "`+s.comment+`"`) ||
		strings.Contains(line, "--comment "+s.comment+" ")
}

// restoreInput renders the set as iptables-restore --noflush input: one transaction
// that empties (or makes) the chain, fills it, deletes the hook chain's old rules of
// ours (stale, the lines given as `iptables -S` printed them) and appends one jump, so
// the jump sits once at the end of the hook chain, as flanneld's does.
func (s *ruleSet) restoreInput(stale []string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%s\n:%s - [0:0]\n", s.table, s.chain)
	for _, r := range s.rules {
		writeRule(&b, "-A", s.chain, r)
	}
	for _, l := range stale {
		b.WriteString("-D" + strings.TrimPrefix(l, "-A") + "\n")
	}
	writeRule(&b, "-A", s.hook, s.jump())
	b.WriteString("COMMIT\n")
	return b.Bytes()
}

// removeInput renders the iptables-restore --noflush input that deletes the hook
// chain's rules of ours and the chain.
func (s *ruleSet) removeInput(stale []string, chainExists bool) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%s\n", s.table)
	for _, l := range stale {
		b.WriteString("-D" + strings.TrimPrefix(l, "-A") + "\n")
	}
	if chainExists {
		fmt.Fprintf(&b, "-F %s\n-X %s\n", s.chain, s.chain)
	}
	b.WriteString("COMMIT\n")
	return b.Bytes()
}

func writeRule(b *bytes.Buffer, verb, chain string, rule []string) {
	b.WriteString(verb + " " + chain)
	for _, a := range rule {
		if a == "" || strings.ContainsAny(a, " \"") {
			a = fmt.Sprintf("%q", a)
		}
		b.WriteString(" " + a)
	}
	b.WriteByte('\n')
}

// chainState is what `iptables -t <table> -S` shows of a set: the chain's rules, in
// order, and the hook chain's rules of ours.
type chainState struct {
	exists bool
	rules  []string
	hooks  []string
}

func (s *ruleSet) state(listing string) chainState {
	var st chainState
	for _, l := range strings.Split(listing, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "-N "+s.chain:
			st.exists = true
		case strings.HasPrefix(l, "-A "+s.chain+" "):
			st.rules = append(st.rules, l)
		case s.ours(l):
			st.hooks = append(st.hooks, l)
		}
	}
	return st
}

// same reports whether two states list the same rules in the same order.
func (st chainState) same(o chainState) bool {
	return st.exists == o.exists && equal(st.rules, o.rules) && equal(st.hooks, o.hooks)
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// parseIptablesVersion returns the version `iptables --version` prints
// ("iptables v1.8.9 (nf_tables)") as three numbers.
func parseIptablesVersion(out string) ([3]int, error) { return parseToolVersion("iptables", out) }

// parseToolVersion is parseIptablesVersion for tool (iptables or ip6tables).
func parseToolVersion(tool, out string) ([3]int, error) {
	var v [3]int
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != tool || !strings.HasPrefix(f[1], "v") {
		return v, fmt.Errorf("%s --version: unexpected output %q", tool, strings.TrimSpace(out))
	}
	parts := strings.SplitN(strings.TrimPrefix(f[1], "v"), ".", 3)
	for i, p := range parts {
		if _, err := fmt.Sscanf(p, "%d", &v[i]); err != nil {
			return v, fmt.Errorf("%s --version: unexpected version %q", tool, f[1])
		}
	}
	return v, nil
}

// randomFullyVersion reports whether iptables version v knows --random-fully
// (added in 1.6.2).
func randomFullyVersion(v [3]int) bool {
	min := [3]int{1, 6, 2}
	for i := range v {
		if v[i] != min[i] {
			return v[i] > min[i]
		}
	}
	return true
}
