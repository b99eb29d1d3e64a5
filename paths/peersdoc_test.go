package paths

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestPeerKeysDocumented: docs/operations.md's list of GET /peers' keys is Peer's
// JSON keys, in order.
func TestPeerKeysDocumented(t *testing.T) {
	var code []string
	pt := reflect.TypeFor[Peer]()
	for i := range pt.NumField() {
		name, _, _ := strings.Cut(pt.Field(i).Tag.Get("json"), ",")
		code = append(code, name)
	}
	data, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`GET /peers`: `\\{\"peers\":\\[\\{([^`]*)\\}\\]\\}`").FindStringSubmatch(string(data))
	if m == nil {
		t.Fatal("docs/operations.md no longer lists GET /peers' keys as `{\"peers\":[{...}]}`")
	}
	var doc []string
	for _, k := range strings.Split(m[1], ",") {
		doc = append(doc, strings.Trim(strings.TrimSpace(k), `"`))
	}
	if !slices.Equal(doc, code) {
		t.Errorf("docs/operations.md lists GET /peers' keys as %q; Peer's are %q", doc, code)
	}
}
