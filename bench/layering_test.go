package bench

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/testenv"
)

// productPkgs are the packages weftd, its CNI plugin and its image are built from:
// none of them may import the harness.
var productPkgs = []string{
	"./cmd/weftd", "./cmd/weft-cni", "./cmd/weft-install", "./cmd/weft-image",
	"./daemon/...", "./encap/...", "./paths/...", "./proxy/...", "./tun/...", "./lease/...", "./firewall/...", "./internal/...", "./transport/...",
	"./status/...", "./checkconfig/...",
}

// TestProductImportsNoHarness: `go list -deps` of every product package (and of
// internal/, which holds product helpers only) names no package under bench/.
func TestProductImportsNoHarness(t *testing.T) {
	testenv.NeedTools(t, "go")
	const harness = "github.com/weftnet/weft/bench"
	for _, p := range productPkgs {
		cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", p)
		cmd.Dir = ".."
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", p, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == harness || strings.HasPrefix(dep, harness+"/") {
				t.Errorf("%s depends on the harness package %s", p, dep)
			}
		}
	}
}

// TestTopLevel: the repository's top level holds the product's packages, the harness
// (bench), and deploy, docs, e2e and test; nothing else grows there unnoticed.
func TestTopLevel(t *testing.T) {
	want := []string{"bench", "checkconfig", "cmd", "daemon", "deploy", "docs", "e2e", "encap", "firewall", "handover", "internal", "lease", "paths", "proxy", "status", "test", "transport", "tun"}
	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && e.Name() != "bin" {
			got = append(got, e.Name())
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("top-level directories %v, want %v", got, want)
	}
}
