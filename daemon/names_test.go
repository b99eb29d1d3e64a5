package daemon

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// backendName is a backend's name, or one of its devices', in a string (the import
// path of a backend package included).
var backendName = regexp.MustCompile(`(?i)(^|[^a-z0-9])(udp|vxlan|host-gw|wireguard|extension)([^a-z0-9]|$)|flannel0|flannel-wg|flannel(-v6)?\.`)

// backendIdent is a backend's name inside an identifier (udpPackets, WireGuardDevice).
var backendIdent = regexp.MustCompile(`(?i)udp|vxlan|hostgw|wireguard|extension|flannel0`)

// TestNoBackendNames: no backend's name, nor its devices', appears in the code of
// daemon/ (its string literals, import paths and identifiers; comments and tests
// aside). What the daemon needs of a backend it asks through the capabilities encap
// declares and of encap/factory, so that a new backend is one package and one line
// in the factory (docs/design.md, "Adding a backend").
func TestNoBackendNames(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					break
				}
				s, err := strconv.Unquote(n.Value)
				if err != nil {
					t.Errorf("%s: %v", fset.Position(n.Pos()), err)
				}
				if m := backendName.FindString(s); m != "" {
					t.Errorf("%s: the string %s names %q: ask encap's capabilities or encap/factory instead",
						fset.Position(n.Pos()), n.Value, m)
				}
			case *ast.Ident:
				if m := backendIdent.FindString(n.Name); m != "" {
					t.Errorf("%s: the identifier %s names %q: ask encap's capabilities or encap/factory instead",
						fset.Position(n.Pos()), n.Name, m)
				}
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("only %d files of daemon/ checked", checked)
	}
}
