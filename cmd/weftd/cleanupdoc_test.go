package main

import (
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

// cleanupDevicesIn returns the devices named in text after "the devices " up to the
// next "(" ("`flannel0`, `flannel.<VNI>`" or "flannel0, flannel.<VNI>").
func cleanupDevicesIn(text string) []string {
	_, list, ok := strings.Cut(text, "the devices ")
	if !ok {
		return nil
	}
	list, _, _ = strings.Cut(list, "(")
	return regexp.MustCompile(`flannel[a-z0-9.<>-]*[a-z0-9>]`).FindAllString(list, -1)
}

// TestCleanupUsageDocumented: `weftd cleanup --help` names the devices
// docs/operations.md says cleanup deletes (daemon's TestCleanupDevicesDocumented
// holds those to the code), and the cleanup section of docs/operations.md names
// every flag cleanup adds to weftd's.
func TestCleanupUsageDocumented(t *testing.T) {
	data, err := os.ReadFile(opsDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(data), "## Taking weft off a host: `weftd cleanup`")
	if !ok {
		t.Fatal("docs/operations.md has no cleanup section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	doc, usage := cleanupDevicesIn(sec), cleanupDevicesIn(strings.Join(strings.Fields(cleanupUsage), " "))
	if len(doc) == 0 || !sameSet(doc, usage) {
		t.Errorf("weftd cleanup's usage names the devices %q; docs/operations.md %q", usage, doc)
	}

	var stderr strings.Builder
	if code := runCleanup([]string{"--help"}, func(string) string { return "" }, io.Discard, &stderr); code != 0 {
		t.Fatalf("weftd cleanup --help: status %d", code)
	}
	daemonFlags := newFlagSet(&options{}, io.Discard)
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9_-]+)`).FindAllStringSubmatch(stderr.String(), -1) {
		if daemonFlags.Lookup(m[1]) != nil {
			continue // documented with weftd's flags
		}
		if !strings.Contains(sec, "`--"+m[1]) {
			t.Errorf("docs/operations.md's cleanup section does not name --%s", m[1])
		}
	}
	for _, m := range regexp.MustCompile("`--([a-z0-9_-]+)").FindAllStringSubmatch(sec, -1) {
		if !strings.Contains(stderr.String(), "  -"+m[1]) {
			t.Errorf("docs/operations.md's cleanup section names --%s, which weftd cleanup does not take", m[1])
		}
	}
}
