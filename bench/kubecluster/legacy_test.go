package kubecluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/weftnet/weft/bench/testenv"
)

func TestLegacyName(t *testing.T) {
	for _, tt := range []struct{ tool, want string }{
		{"iptables", "iptables-legacy"},
		{"iptables-save", "iptables-legacy-save"},
		{"iptables-restore", "iptables-legacy-restore"},
		{"ip6tables", "ip6tables-legacy"},
		{"ip6tables-save", "ip6tables-legacy-save"},
		{"ip6tables-restore", "ip6tables-legacy-restore"},
	} {
		if got := legacyName(tt.tool); got != tt.want {
			t.Errorf("legacyName(%q) = %q, want %q", tt.tool, got, tt.want)
		}
	}
}

// TestLegacyPath: every tool of a legacy node's PATH dir ends at the legacy
// multi-call binary, under the plain tool's name (which picks the tool it runs).
func TestLegacyPath(t *testing.T) {
	testenv.NeedTools(t, "iptables-legacy", "iptables-legacy-save", "iptables-legacy-restore",
		"ip6tables-legacy", "ip6tables-legacy-save", "ip6tables-legacy-restore")
	dir := t.TempDir()
	path, err := legacyPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "legacy-bin")
	if want := bin + ":" + os.Getenv("PATH"); path != want {
		t.Fatalf("PATH %q, want %q", path, want)
	}
	for _, tool := range legacyTools {
		end, err := filepath.EvalSymlinks(filepath.Join(bin, tool))
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(end) != "xtables-legacy-multi" {
			t.Errorf("%s ends at %s, want xtables-legacy-multi", tool, end)
		}
	}
}
