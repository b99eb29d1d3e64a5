package factory

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"io"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/encap/vxlan"
	"github.com/weftnet/weft/encap/wireguard"
	"github.com/weftnet/weft/proxy"
	"github.com/weftnet/weft/transport/relay"
)

// The pictures of docs/ held to their Graphviz sources and to the code: each
// docs/pictures/X.svg is drawn from X.dot beside it by `make pictures`, which writes
// the source's sha256 into the SVG. The tests only read files: they need no Graphviz.
// They sit with TestBackendsDocumented, which may import the backends.

// picturesDir is where the pictures and their sources are.
const picturesDir = "../../docs/pictures"

// sourceRE is the comment `make pictures` puts right after an SVG's XML declaration.
var sourceRE = regexp.MustCompile(`^<!-- source: (\S+) sha256:([0-9a-f]{64}) -->$`)

// TestPictures: every .dot here has its .svg, drawn from the .dot as it is now.
func TestPictures(t *testing.T) {
	dots, err := filepath.Glob(filepath.Join(picturesDir, "*.dot"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dots) == 0 {
		t.Fatal("no .dot sources in docs/pictures")
	}
	for _, path := range dots {
		dot := filepath.Base(path)
		t.Run(dot, func(t *testing.T) {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			svgName := strings.TrimSuffix(dot, ".dot") + ".svg"
			svg, err := os.ReadFile(filepath.Join(picturesDir, svgName))
			if errors.Is(err, os.ErrNotExist) {
				t.Fatalf("docs/pictures/%s has no %s: run `make pictures`", dot, svgName)
			}
			if err != nil {
				t.Fatal(err)
			}
			name, sum, err := svgSource(svg)
			if err != nil {
				t.Fatalf("docs/pictures/%s: %v: run `make pictures`", svgName, err)
			}
			if name != dot {
				t.Errorf("docs/pictures/%s says it is drawn from %s, not %s: run `make pictures`", svgName, name, dot)
			}
			if want := sha256.Sum256(src); sum != hex.EncodeToString(want[:]) {
				t.Errorf("docs/pictures/%s is stale: drawn from a %s of sha256 %s, which is now %x: run `make pictures`",
					svgName, dot, sum, want)
			}
			if err := wellFormed(svg); err != nil {
				t.Errorf("docs/pictures/%s is not well-formed XML: %v", svgName, err)
			}
		})
	}
}

// svgSource reads the source comment on the line after svg's XML declaration.
func svgSource(svg []byte) (name, sum string, err error) {
	lines := strings.SplitN(string(svg), "\n", 3)
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "<?xml ") {
		return "", "", errors.New("no XML declaration on its first line")
	}
	m := sourceRE.FindStringSubmatch(strings.TrimSpace(lines[1]))
	if m == nil {
		return "", "", fmt.Errorf("no `<!-- source: X.dot sha256:... -->` after its XML declaration (line 2 is %q)", lines[1])
	}
	return m[1], m[2], nil
}

func wellFormed(b []byte) error {
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// testRanges are the addresses the pictures may show: the project's test ranges.
var testRanges = []netip.Prefix{
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("198.18.0.0/16"),
}

var (
	ipv4RE = regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b`)
	// A port: after an address or a colon (":51822"), or after "UDP".
	portRE = regexp.MustCompile(`:(\d{2,5})\b|\bUDP (\d+)\b`)
)

// knownPorts are the ports the pictures may name, and whose they are.
func knownPorts(t *testing.T) map[int]string {
	ports := map[int]string{
		wireguard.DefaultListenPort:   "wireguard.DefaultListenPort",
		wireguard.DefaultListenPortV6: "wireguard.DefaultListenPortV6",
		relay.DefaultPort:             "relay.DefaultPort (the path port)",
		vxlan.DefaultPort:             "vxlan.DefaultPort",
		proxy.DefaultPort:             "proxy.DefaultPort (the udp backend)",
	}
	for _, e := range []string{lab.EtcdEndpoint, lab.InternetEtcd} {
		u, err := url.Parse(e)
		if err != nil {
			t.Fatal(err)
		}
		p, err := strconv.Atoi(u.Port())
		if err != nil {
			t.Fatalf("etcd endpoint %s: %v", e, err)
		}
		ports[p] = "the labs' etcd"
	}
	return ports
}

// TestPicturesAddresses: every address a picture shows is of the test ranges, and
// every port it names is one of the code's.
func TestPicturesAddresses(t *testing.T) {
	dots, err := filepath.Glob(filepath.Join(picturesDir, "*.dot"))
	if err != nil {
		t.Fatal(err)
	}
	known := knownPorts(t)
	for _, path := range dots {
		dot := filepath.Base(path)
		src := readDot(t, dot)
		for _, s := range ipv4RE.FindAllString(src, -1) {
			a, err := netip.ParseAddr(s)
			ok := err == nil
			if ok {
				ok = false
				for _, p := range testRanges {
					ok = ok || p.Contains(a)
				}
			}
			if !ok {
				t.Errorf("docs/pictures/%s shows %s, not of the test ranges %v", dot, s, testRanges)
			}
		}
		for _, m := range portRE.FindAllStringSubmatch(src, -1) {
			n, _ := strconv.Atoi(m[1] + m[2])
			if _, ok := known[n]; !ok {
				t.Errorf("docs/pictures/%s names port %d (%q), which is none of the code's: %v", dot, n, m[0], known)
			}
		}
	}
}

// TestPicturesPorts: the ports the pictures name for what are the code's constants.
func TestPicturesPorts(t *testing.T) {
	for _, c := range []struct {
		dot, re string
		want    int
		what    string
	}{
		{"sites.dot", `WireGuard UDP (\d+)`, wireguard.DefaultListenPort, "wireguard.DefaultListenPort"},
		{"sites.dot", `WireGuard IPv6 UDP (\d+)`, wireguard.DefaultListenPortV6, "wireguard.DefaultListenPortV6"},
		{"sites.dot", `path port UDP (\d+)`, relay.DefaultPort, "relay.DefaultPort"},
		{"sites.dot", `(\d+)-byte relay frame`, relay.MaxOverhead, "relay.MaxOverhead"},
		{"quickstart-lab.dot", `udp backend UDP (\d+)`, proxy.DefaultPort, "proxy.DefaultPort"},
		{"quickstart-lab.dot", `vxlan UDP (\d+)`, vxlan.DefaultPort, "vxlan.DefaultPort"},
	} {
		ms := regexp.MustCompile(c.re).FindAllStringSubmatch(readDot(t, c.dot), -1)
		if len(ms) == 0 {
			t.Errorf("docs/pictures/%s has no %q (%s is %d)", c.dot, c.re, c.what, c.want)
		}
		for _, m := range ms {
			if n, _ := strconv.Atoi(m[1]); n != c.want {
				t.Errorf("docs/pictures/%s says %q; %s is %d", c.dot, m[0], c.what, c.want)
			}
		}
	}
	for _, c := range []struct{ dot, want, what string }{
		{"sites.dot", strings.TrimPrefix(lab.InternetEtcd, "http://"), "lab.InternetEtcd"},
		{"quickstart-lab.dot", lab.EtcdEndpoint, "lab.EtcdEndpoint"},
		{"quickstart-lab.dot", "Network " + lab.Overlay.String(), "lab.Overlay"},
	} {
		if !strings.Contains(readDot(t, c.dot), c.want) {
			t.Errorf("docs/pictures/%s does not say %q (%s)", c.dot, c.want, c.what)
		}
	}
}

// timerRE is how sites.dot names a timer or count of the code: "8 s (TryFor)",
// "2 answers (directAnswers)", "up to 8 (maxRelays)", "10 s (relay.HelloEvery)".
var timerRE = regexp.MustCompile(`(\d+)( s)? (?:answers )?\(((?:relay\.)?[a-zA-Z]\w*)\)`)

// TestPicturesTimers: the timers sites.dot gives the ways are the code's: package
// way's (the decision) and encap/wireguard's (the chooser around it).
func TestPicturesTimers(t *testing.T) {
	consts := packageConsts(t, "../wireguard")
	for name, v := range packageConsts(t, "../../paths/way") {
		consts[name] = v
	}
	consts["relay.HelloEvery"] = constant.MakeInt64(int64(relay.HelloEvery))
	src := readDot(t, "sites.dot")
	seen := map[string]bool{}
	for _, m := range timerRE.FindAllStringSubmatch(src, -1) {
		name := m[3]
		seen[name] = true
		v, ok := consts[name]
		if !ok {
			t.Errorf("docs/pictures/sites.dot says %q: neither paths/way nor encap/wireguard has a constant %s", m[0], name)
			continue
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		if m[2] != "" {
			n *= int64(time.Second)
		}
		got, exact := constant.Int64Val(v)
		if !exact || got != n {
			what := fmt.Sprint(got)
			if m[2] != "" || got >= int64(time.Millisecond) {
				what = time.Duration(got).String()
			}
			t.Errorf("docs/pictures/sites.dot says %q; %s is %s", m[0], name, what)
		}
	}
	for _, name := range []string{"TryFor", "directEvery", "directAnswers", "DirectBackoff", "measureEvery", "relayStale"} {
		if !seen[name] {
			t.Errorf("docs/pictures/sites.dot names no %s (write it as \"8 s (TryFor)\")", name)
		}
	}
}

// packageConsts evaluates the integer constants of the Go package in dir (its
// non-test files) whose values are literals, time units and other such constants.
func packageConsts(t *testing.T, dir string) map[string]constant.Value {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var specs []*ast.ValueSpec
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					specs = append(specs, s.(*ast.ValueSpec))
				}
			}
		}
	}
	if len(specs) == 0 {
		t.Fatalf("no constants in %s", dir)
	}
	consts := map[string]constant.Value{}
	// Constants may use others declared later: evaluate until nothing more resolves.
	for progress := true; progress; {
		progress = false
		for _, s := range specs {
			for i, n := range s.Names {
				if _, done := consts[n.Name]; done || i >= len(s.Values) {
					continue
				}
				if v := evalConst(s.Values[i], consts); v.Kind() == constant.Int {
					consts[n.Name], progress = v, true
				}
			}
		}
	}
	return consts
}

// evalConst is e's value, or an unknown one for what it does not evaluate.
func evalConst(e ast.Expr, env map[string]constant.Value) constant.Value {
	unknown := constant.MakeUnknown()
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.INT {
			return constant.MakeFromLiteral(e.Value, e.Kind, 0)
		}
	case *ast.Ident:
		if v, ok := env[e.Name]; ok {
			return v
		}
	case *ast.SelectorExpr:
		units := map[string]time.Duration{"Nanosecond": time.Nanosecond, "Microsecond": time.Microsecond,
			"Millisecond": time.Millisecond, "Second": time.Second, "Minute": time.Minute, "Hour": time.Hour}
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "time" {
			if u, ok := units[e.Sel.Name]; ok {
				return constant.MakeInt64(int64(u))
			}
		}
	case *ast.ParenExpr:
		return evalConst(e.X, env)
	case *ast.BinaryExpr:
		x, y := evalConst(e.X, env), evalConst(e.Y, env)
		if x.Kind() != constant.Int || y.Kind() != constant.Int {
			return unknown
		}
		switch e.Op {
		case token.ADD, token.SUB, token.MUL:
			return constant.BinaryOp(x, e.Op, y)
		case token.SHL:
			s, _ := constant.Uint64Val(y)
			return constant.Shift(x, e.Op, uint(s))
		}
	}
	return unknown
}

func readDot(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(picturesDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
