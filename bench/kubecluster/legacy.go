package kubecluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// legacyTools are the commands a node whose firewall is iptables-legacy finds as the
// -legacy tools: what the kubelet, containerd's CNI plugins and iptables-wrapper style
// detection run.
var legacyTools = []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"}

// legacyName is the legacy tool of a command: iptables-save -> iptables-legacy-save.
func legacyName(tool string) string {
	base, suffix, _ := strings.Cut(tool, "-")
	if suffix != "" {
		suffix = "-" + suffix
	}
	return base + "-legacy" + suffix
}

// legacyPath makes dir/legacy-bin, where each of legacyTools is a link to its
// -legacy tool, and returns a PATH that looks there first. xtables-legacy-multi picks
// its tool by the name it was run as, so a link named iptables runs legacy iptables.
func legacyPath(dir string) (string, error) {
	bin := filepath.Join(dir, "legacy-bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", err
	}
	for _, tool := range legacyTools {
		target, err := exec.LookPath(legacyName(tool))
		if err != nil {
			return "", fmt.Errorf("a legacy iptables node: %w", err)
		}
		if err := os.Symlink(target, filepath.Join(bin, tool)); err != nil {
			return "", err
		}
	}
	return bin + ":" + os.Getenv("PATH"), nil
}

// iptables is the command the harness writes the node's own rules with: the node's
// backend.
func (n *Node) iptables() string {
	if n.LegacyIPTables {
		return "iptables-legacy"
	}
	return "iptables"
}

// isLegacy reports whether o makes the node named name a legacy iptables node.
func (o Options) isLegacy(name string) bool { return slices.Contains(o.LegacyIPTables, name) }
