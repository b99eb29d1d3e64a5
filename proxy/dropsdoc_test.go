package proxy

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dropDocTable returns the rows of the Markdown table under header, cells trimmed.
func dropDocTable(t *testing.T, path, header string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	i := slices.Index(lines, header)
	if i < 0 || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "|--") {
		t.Fatalf("%s has no table with the header %q", path, header)
	}
	var rows [][]string
	for _, l := range lines[i+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		f := strings.Split(strings.TrimSpace(l), "|")
		row := f[1 : len(f)-1]
		for j := range row {
			row[j] = strings.TrimSpace(row[j])
		}
		if len(row) != 3 {
			t.Fatalf("%s: row %q has %d cells, want 3", path, l, len(row))
		}
		rows = append(rows, row)
	}
	return rows
}

var backquoted = regexp.MustCompile("^`([a-z_]+)`$")

// TestDropReasonsDocumented: docs/operations.md's table of the udp backend's drops
// lists every DropReason once and nothing else, its metric row says how many there
// are, and every counter docs/performance.md's hostile datagrams table names is a
// reason (or rx_packets, for what is forwarded).
func TestDropReasonsDocumented(t *testing.T) {
	var code []string
	for _, r := range DropReasons() {
		code = append(code, r.String())
	}
	const ops = "../docs/operations.md"
	var doc []string
	for _, row := range dropDocTable(t, ops, "| reason | where | means |") {
		m := backquoted.FindStringSubmatch(row[0])
		if m == nil {
			t.Errorf("drops table row starts with %q, not a `reason`", row[0])
			continue
		}
		if slices.Contains(doc, m[1]) {
			t.Errorf("docs/operations.md lists the drop reason %s twice", m[1])
		}
		doc = append(doc, m[1])
		if w := row[1]; w != "both" && w != "ingress" && w != "egress" {
			t.Errorf("drop reason %s: where %q is not both, ingress or egress", m[1], w)
		}
	}
	a, b := slices.Sorted(slices.Values(doc)), slices.Sorted(slices.Values(code))
	if !slices.Equal(a, b) {
		t.Errorf("docs/operations.md's drop reasons are %q; proxy's are %q", a, b)
	}

	words := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
		"eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"}
	data, err := os.ReadFile(ops)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`reason` \\(the ([a-z]+) of \\[the udp backend's drops\\]").FindStringSubmatch(string(data))
	if m == nil {
		t.Error("docs/operations.md's weft_udp_dropped_packets_total row no longer says \"(the N of [the udp backend's drops]\"")
	} else if len(code) >= len(words) || m[1] != words[len(code)] {
		t.Errorf("docs/operations.md says the udp backend drops for %s reasons; it has %d", m[1], len(code))
	}

	for _, row := range dropDocTable(t, "../docs/performance.md", "| datagram | weftd | counter |") {
		m := backquoted.FindStringSubmatch(row[2])
		if m == nil {
			t.Errorf("docs/performance.md's hostile datagrams row counts %q, not a `counter`", row[2])
		} else if m[1] != "rx_packets" && !slices.Contains(code, m[1]) {
			t.Errorf("docs/performance.md counts a hostile datagram as %s, which is no drop reason", m[1])
		}
	}
}
