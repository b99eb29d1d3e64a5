package firewall

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// IPTablesMode is the backend of iptables 1.8 and later that weft's iptables rules
// are written with: the kernel's legacy x_tables or nf_tables. The two keep separate
// rule sets, and rules only order against rules of their own backend, so weft writes
// where the host's other rules (kube-proxy's, the kubelet's) already are.
type IPTablesMode string

const (
	// IPTablesPlain runs plain `iptables`, whatever backend it runs on the host
	// (update-alternatives, the image's link): what weftd did before it detected modes.
	IPTablesPlain IPTablesMode = ""
	// IPTablesLegacy runs iptables-legacy, iptables-legacy-restore and the ip6tables ones.
	IPTablesLegacy IPTablesMode = "legacy"
	// IPTablesNFT runs iptables-nft, iptables-nft-restore and the ip6tables ones.
	IPTablesNFT IPTablesMode = "nft"
)

// command is the name of the tool of this mode: command("iptables", "-restore") is
// iptables-legacy-restore in legacy mode, iptables-restore in plain mode.
func (m IPTablesMode) command(base, suffix string) string {
	if m == IPTablesPlain {
		return base + suffix
	}
	return base + "-" + string(m) + suffix
}

// String names the mode as its command: iptables, iptables-legacy or iptables-nft.
func (m IPTablesMode) String() string { return m.command("iptables", "") }

// ParseIPTablesMode reads a mode as a flag gives it: "legacy", "nft", or "plain"
// (plain `iptables`).
func ParseIPTablesMode(s string) (IPTablesMode, error) {
	switch s {
	case "legacy":
		return IPTablesLegacy, nil
	case "nft":
		return IPTablesNFT, nil
	case "plain":
		return IPTablesPlain, nil
	}
	return IPTablesPlain, fmt.Errorf("iptables mode %q: want legacy, nft or plain", s)
}

// ModeDetection is what DetectIPTablesMode found.
type ModeDetection struct {
	Mode IPTablesMode
	// Legacy and NFT count the rules (iptables-save's "-A" lines, IPv4 and IPv6) each
	// backend holds; -1 for a backend whose tools are not installed.
	Legacy, NFT int
	// Reason says in a few words why Mode was taken, for the log.
	Reason string
}

// kubeletChains are the chains the kubelet (1.17 and later) makes in the mangle table
// of the backend it uses, so that other programs can tell which one that is.
var kubeletChains = []string{"KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"}

// detectTimeout bounds each iptables-save run of DetectIPTablesMode.
const detectTimeout = 10 * time.Second

// DetectIPTablesMode picks the iptables backend the host already uses, as kube-proxy's
// and flannel's images do (iptables-wrapper):
//
//   - where only one of iptables-legacy and iptables-nft is installed, that one; where
//     neither is (iptables before 1.8), plain iptables;
//   - the backend holding the kubelet's hint chains (KUBE-IPTABLES-HINT,
//     KUBE-KUBELET-CANARY), nft first;
//   - else the backend holding more rules; on a tie (none in either, say) the
//     backend plain `iptables` runs on this host, or nft when that cannot be told.
//
// Tools that fail count no rules: detection itself never fails.
func DetectIPTablesMode(ctx context.Context) ModeDetection {
	legacy, nft := haveMode(IPTablesLegacy), haveMode(IPTablesNFT)
	d := ModeDetection{Legacy: -1, NFT: -1}
	switch {
	case !legacy && !nft:
		d.Reason = "neither iptables-legacy nor iptables-nft is installed"
		return d
	case !nft:
		d.Mode, d.Reason = IPTablesLegacy, "iptables-nft is not installed"
		d.Legacy = countRules(saveAll(ctx, IPTablesLegacy))
		return d
	case !legacy:
		d.Mode, d.Reason = IPTablesNFT, "iptables-legacy is not installed"
		d.NFT = countRules(saveAll(ctx, IPTablesNFT))
		return d
	}
	nftSave, legacySave := saveAll(ctx, IPTablesNFT), saveAll(ctx, IPTablesLegacy)
	d.NFT, d.Legacy = countRules(nftSave), countRules(legacySave)
	switch {
	case hasKubeletChain(nftSave):
		d.Mode, d.Reason = IPTablesNFT, "the kubelet's chains are in nftables"
	case hasKubeletChain(legacySave):
		d.Mode, d.Reason = IPTablesLegacy, "the kubelet's chains are in legacy iptables"
	case d.Legacy > d.NFT:
		d.Mode, d.Reason = IPTablesLegacy, "more rules in legacy iptables"
	case d.NFT > d.Legacy:
		d.Mode, d.Reason = IPTablesNFT, "more rules in iptables-nft"
	default:
		d.Mode = plainMode()
		d.Reason = "as many rules in both: the backend plain iptables runs"
		if d.Mode == IPTablesPlain {
			d.Mode, d.Reason = IPTablesNFT, "as many rules in both: nft, the default"
		}
	}
	return d
}

// haveMode reports whether the mode's iptables-save is installed.
func haveMode(m IPTablesMode) bool {
	_, err := exec.LookPath(m.command("iptables", "-save"))
	return err == nil
}

// plainMode is the backend plain `iptables` runs, told from the program its links
// end at (xtables-legacy-multi, xtables-nft-multi); IPTablesPlain when that says
// nothing (a wrapper script, iptables before 1.8, no iptables at all).
func plainMode() IPTablesMode {
	p, err := exec.LookPath("iptables")
	if err != nil {
		return IPTablesPlain
	}
	if p, err = filepath.EvalSymlinks(p); err != nil {
		return IPTablesPlain
	}
	switch filepath.Base(p) {
	case "xtables-legacy-multi", "iptables-legacy":
		return IPTablesLegacy
	case "xtables-nft-multi", "iptables-nft":
		return IPTablesNFT
	}
	return IPTablesPlain
}

// saveAll is what the mode's iptables-save and ip6tables-save print, each bounded
// by detectTimeout; a command that fails adds nothing. Legacy mode's is asked for
// every table: naming one (-t mangle) would make the kernel create it.
func saveAll(ctx context.Context, m IPTablesMode) []byte {
	var all []byte
	for _, base := range []string{"iptables", "ip6tables"} {
		cctx, cancel := context.WithTimeout(ctx, detectTimeout)
		out, err := exec.CommandContext(cctx, m.command(base, "-save")).Output()
		cancel()
		if err == nil {
			all = append(all, out...)
		}
	}
	return all
}

// countRules counts the rules (lines "-A chain ...") of iptables-save output.
func countRules(save []byte) int {
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(save))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "-A ") {
			n++
		}
	}
	return n
}

// hasKubeletChain reports whether iptables-save output declares one of the kubelet's
// hint chains (":KUBE-IPTABLES-HINT - [0:0]").
func hasKubeletChain(save []byte) bool {
	for _, line := range bytes.Split(save, []byte("\n")) {
		for _, c := range kubeletChains {
			if bytes.HasPrefix(line, []byte(":"+c+" ")) {
				return true
			}
		}
	}
	return false
}
