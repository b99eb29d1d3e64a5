package bench

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/testenv"
)

const module = "github.com/weftnet/weft"

// pkgImports is one package's imports as `go list` gives them: of its code, and of
// its tests (in the package and in package _test).
type pkgImports struct {
	path        string
	imports     []string
	testImports []string
}

// listImports lists every package of the module with its imports.
func listImports(t *testing.T) []pkgImports {
	t.Helper()
	testenv.NeedTools(t, "go")
	cmd := exec.Command("go", "list", "-e", "-f",
		`{{.ImportPath}}|{{join .Imports ","}}|{{join .TestImports ","}},{{join .XTestImports ","}}`, "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkgImports
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 3 {
			t.Fatalf("go list: odd line %q", line)
		}
		split := func(s string) []string {
			return slices.DeleteFunc(strings.Split(s, ","), func(s string) bool { return s == "" })
		}
		pkgs = append(pkgs, pkgImports{path: f[0], imports: split(f[1]), testImports: split(f[2])})
	}
	return pkgs
}

// under reports whether pkg is dir or in it (dir relative to the module).
func under(pkg, dir string) bool {
	p := module + "/" + dir
	return pkg == p || strings.HasPrefix(pkg, p+"/")
}

// backendOf names the backend package pkg is or is in ("" for none): a package under
// encap/ but encap/kernel (what the kernel backends share) and encap/factory.
func backendOf(pkg string) string {
	rest, ok := strings.CutPrefix(pkg, module+"/encap/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	if name == "kernel" || name == "factory" {
		return ""
	}
	return name
}

// harness reports whether pkg is test code: the harness, the end-to-end tests, test/.
func harness(pkg string) bool {
	return under(pkg, "bench") || under(pkg, "e2e") || under(pkg, "test")
}

// TestBackendShape: one package per backend, reached only through the factory.
//   - a backend package imports no other backend (encap/kernel is the shared one);
//   - encap and encap/kernel import no backend;
//   - no product package but encap/factory imports a backend, and no product tests
//     but those under encap/ (a backend's own, encap/kernel's through vxlan and
//     host-gw, the factory's) do;
//   - weftd (cmd/weftd, and a daemon package when there is one) imports of encap/
//     only encap and encap/factory, in its code and in its tests.
func TestBackendShape(t *testing.T) {
	pkgs := listImports(t)
	seen := map[string]bool{}
	for _, p := range pkgs {
		if b := backendOf(p.path); b != "" {
			seen[b] = true
		}
		for _, imp := range p.imports {
			b := backendOf(imp)
			switch {
			case b != "" && backendOf(p.path) != "" && backendOf(p.path) != b:
				t.Errorf("backend package %s imports another backend's package %s", p.path, imp)
			case b != "" && (p.path == module+"/encap" || under(p.path, "encap/kernel")):
				t.Errorf("%s imports the backend package %s", p.path, imp)
			case b != "" && backendOf(p.path) == "" && !under(p.path, "encap/factory") && !harness(p.path):
				t.Errorf("%s imports the backend package %s; only encap/factory may", p.path, imp)
			}
		}
		for _, imp := range p.testImports {
			if backendOf(imp) != "" && !under(p.path, "encap") && !harness(p.path) {
				t.Errorf("the tests of %s import the backend package %s", p.path, imp)
			}
		}
		if under(p.path, "cmd/weftd") || under(p.path, "daemon") {
			for _, imp := range slices.Concat(p.imports, p.testImports) {
				if under(imp, "encap") && imp != module+"/encap" && imp != module+"/encap/factory" {
					t.Errorf("%s imports %s; weftd takes only encap and encap/factory", p.path, imp)
				}
			}
		}
	}
	// The test must see what it guards: a layout it does not know fails it.
	for _, b := range []string{"udp", "vxlan", "hostgw", "wireguard", "extension", "alloc"} {
		if !seen[b] {
			t.Errorf("no package encap/%s: the shape this test checks has changed; update it", b)
		}
	}
}
