package wireguard

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDropReasonsDocumented: the reasons docs/operations.md gives
// weft_wireguard_dropped_packets_total are wgDropNames, all of them and no other,
// and every reason wgDropLines counts has a name.
func TestDropReasonsDocumented(t *testing.T) {
	data, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "| `weft_wireguard_dropped_packets_total` |") {
			row = l
		}
	}
	if row == "" {
		t.Fatal("docs/operations.md's metric table has no weft_wireguard_dropped_packets_total row")
	}
	m := regexp.MustCompile("`reason` \\(([^)]*)\\)").FindStringSubmatch(row)
	if m == nil {
		t.Fatalf("the weft_wireguard_dropped_packets_total row does not list the reasons as `reason` (...): %s", row)
	}
	var doc []string
	for _, s := range regexp.MustCompile("`([a-z0-9_]+)`").FindAllStringSubmatch(m[1], -1) {
		doc = append(doc, s[1])
	}
	a, b := slices.Sorted(slices.Values(doc)), slices.Sorted(slices.Values(wgDropNames[:]))
	if !slices.Equal(a, b) {
		t.Errorf("docs/operations.md gives the wireguard drop reasons %q; the backend counts %q", a, b)
	}
	for line, r := range wgDropLines {
		if r < 0 || r >= numWGDropReasons {
			t.Errorf("wgDropLines counts %q under reason %d, which has no name", line, r)
		}
	}
}
