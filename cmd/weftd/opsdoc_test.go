package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/factory"
	"github.com/weftnet/weft/lease"
)

// opsDoc is docs/operations.md, which documents every flag and backend.
const opsDoc = "../../docs/operations.md"

// docBackends are the Backend.Type values weftd takes, as docs/operations.md's backend
// table lists them. TestBackendsDocumented checks this list both ways: against the
// table and against encap.New.
var docBackends = []string{"udp", "vxlan", "host-gw", "wireguard", "alloc", "extension"}

// tableRows returns the rows (cells trimmed) of the Markdown table of doc whose header
// line is header, without the header and separator lines.
func tableRows(t *testing.T, doc, header string) [][]string {
	t.Helper()
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	start := slices.Index(lines, header)
	if start < 0 || start+1 >= len(lines) || !strings.HasPrefix(lines[start+1], "|--") {
		t.Fatalf("%s has no table with the header %q", doc, header)
	}
	var rows [][]string
	for _, l := range lines[start+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		rows = append(rows, tableCells(l))
	}
	if len(rows) == 0 {
		t.Fatalf("%s: the table under %q has no rows", doc, header)
	}
	return rows
}

// tableCells splits a Markdown table row into its cells, trimmed; a | inside a code
// span or escaped as \| does not end a cell.
func tableCells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(row, "|")
	var cells []string
	var cell strings.Builder
	code := false
	for i := 0; i < len(row); i++ {
		switch c := row[i]; {
		case c == '\\' && i+1 < len(row) && row[i+1] == '|':
			cell.WriteByte('|')
			i++
		case c == '`':
			code = !code
			cell.WriteByte(c)
		case c == '|' && !code:
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(c)
		}
	}
	if rest := strings.TrimSpace(cell.String()); rest != "" {
		cells = append(cells, rest)
	}
	return cells
}

var (
	docFlagName = regexp.MustCompile("`--([a-z0-9_-]+)`")
	// docOneValue is a default cell holding one value and nothing else: `60`.
	docOneValue = regexp.MustCompile("^`([^`]*)`$")
)

// TestFlagsDocumented: the flag table of docs/operations.md names every flag weftd
// defines, each once, and no other; a row with one flag and a default that is one
// value gives the flag's real default.
func TestFlagsDocumented(t *testing.T) {
	fs := newFlagSet(&options{}, io.Discard)
	documented := map[string]int{}
	for _, row := range tableRows(t, opsDoc, "| flag | default | meaning |") {
		if len(row) < 3 {
			t.Errorf("flag table row %q: want 3 cells", row)
			continue
		}
		names := docFlagName.FindAllStringSubmatch(row[0], -1)
		if len(names) == 0 {
			t.Errorf("flag table row %q names no `--flag`", row[0])
		}
		for _, m := range names {
			documented[m[1]]++
			f := fs.Lookup(m[1])
			if f == nil {
				t.Errorf("docs/operations.md lists --%s, which weftd does not define", m[1])
				continue
			}
			if v := docOneValue.FindStringSubmatch(row[1]); len(names) == 1 && v != nil && v[1] != f.DefValue {
				t.Errorf("docs/operations.md gives --%s the default %q; weftd's is %q", m[1], v[1], f.DefValue)
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		switch documented[f.Name] {
		case 0:
			t.Errorf("docs/operations.md's flag table lacks --%s (%s)", f.Name, f.Usage)
		case 1:
		default:
			t.Errorf("docs/operations.md's flag table lists --%s %d times", f.Name, documented[f.Name])
		}
	})
}

// TestBackendsDocumented: the backend table of docs/operations.md lists exactly
// docBackends, encap.New builds each of them, and encap.New's error for an unknown
// type names exactly docBackends as the ones weft has.
func TestBackendsDocumented(t *testing.T) {
	var documented []string
	for _, row := range tableRows(t, opsDoc, "| `Backend.Type` | options |") {
		m := regexp.MustCompile("^`([a-z-]+)`").FindStringSubmatch(row[0])
		if m == nil {
			t.Errorf("backend table row %q does not start with a `type`", row[0])
			continue
		}
		documented = append(documented, m[1])
	}
	if !sameSet(documented, docBackends) {
		t.Errorf("docs/operations.md's backend table lists %q; weftd's backends are %q", documented, docBackends)
	}

	for _, bt := range docBackends {
		cfg, err := lease.ParseConfig([]byte(`{"Network":"198.18.0.0/16","Backend":{"Type":"` + bt + `"}}`))
		if err != nil {
			t.Fatalf("%s: %v", bt, err)
		}
		be, err := factory.New(cfg, encap.ExternalInterface{MTU: 1500}, factory.Tuning{}, zap.NewNop())
		if err != nil {
			t.Errorf("encap.New refuses backend %q, which docBackends lists: %v", bt, err)
			continue
		}
		if be.Type() != bt {
			t.Errorf("factory.New(%q) built a backend of type %q", bt, be.Type())
		}
	}

	cfg, err := lease.ParseConfig([]byte(`{"Network":"198.18.0.0/16","Backend":{"Type":"no-such-backend"}}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = factory.New(cfg, encap.ExternalInterface{MTU: 1500}, factory.Tuning{}, zap.NewNop())
	if !errors.Is(err, encap.ErrUnknownBackend) {
		t.Fatalf("encap.New of an unknown type: %v, want encap.ErrUnknownBackend", err)
	}
	named := backendsNamed(err.Error())
	if named == nil {
		t.Fatalf("encap.New's error for an unknown type no longer reads \"... weft has a, b and c\": %q; update backendsNamed", err)
	}
	if !sameSet(named, docBackends) {
		t.Errorf("encap.New says weft has %q; docBackends (and docs/operations.md) list %q", named, docBackends)
	}
}

// backendsNamed reads the list of backends from encap.New's error for an unknown
// type, "...: weft has udp, vxlan, ... and extension"; nil when it has no such list.
func backendsNamed(msg string) []string {
	_, list, ok := strings.Cut(msg, "weft has ")
	if !ok {
		return nil
	}
	var out []string
	for _, f := range strings.Split(strings.ReplaceAll(list, " and ", ", "), ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestTableCells(t *testing.T) {
	for _, c := range []struct {
		row  string
		want []string
	}{
		{"| `--a` | `1` | one |", []string{"`--a`", "`1`", "one"}},
		{"| `--b`, `--c` | | two |", []string{"`--b`, `--c`", "", "two"}},
		{"| `a|b` | x \\| y |", []string{"`a|b`", "x | y"}},
	} {
		if got := tableCells(c.row); !slices.Equal(got, c.want) {
			t.Errorf("tableCells(%q) = %q, want %q", c.row, got, c.want)
		}
	}
}
