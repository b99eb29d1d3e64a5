package factory

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/udp"
	"github.com/weftnet/weft/encap/vxlan"
	"github.com/weftnet/weft/encap/wireguard"
	"github.com/weftnet/weft/proxy"
	"github.com/weftnet/weft/transport/relay"
)

// TestBackendsDocumented holds docs/backends.md's table of ports and devices to the
// code: a row for every backend New builds, each with exactly the default ports and
// the devices (encap.Device names) of its package.
func TestBackendsDocumented(t *testing.T) {
	data, err := os.ReadFile("../../docs/backends.md")
	if err != nil {
		t.Fatal(err)
	}
	names := func(ds []encap.Device) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Name)
		}
		return out
	}
	ports := func(ps ...int) []string {
		var out []string
		for _, p := range ps {
			out = append(out, strconv.Itoa(p))
		}
		return out
	}
	want := map[string]struct{ ports, devices []string }{
		"udp":       {ports(proxy.DefaultPort), names(udp.Devices)},
		"vxlan":     {ports(vxlan.DefaultPort), names(vxlan.Devices)},
		"host-gw":   {},
		"wireguard": {ports(wireguard.DefaultListenPort, wireguard.DefaultListenPortV6, relay.DefaultPort), names(wireguard.Devices)},
		"extension": {},
		"alloc":     {},
	}
	lines := strings.Split(string(data), "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| backend | ports |") })
	if i < 0 {
		t.Fatal("docs/backends.md has no table headed | backend | ports | ...")
	}
	head := cells(lines[i])
	pcol, dcol := slices.Index(head, "ports"), slices.Index(head, "device")
	if pcol < 0 || dcol < 0 {
		t.Fatalf("header %q lacks ports or device", lines[i])
	}
	span := regexp.MustCompile("`([^`]+)`")
	spans := func(c string) []string {
		var out []string
		for _, m := range span.FindAllStringSubmatch(c, -1) {
			out = append(out, m[1])
		}
		slices.Sort(out)
		return out
	}
	seen := map[string]bool{}
	for _, l := range lines[i+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		c := cells(l)
		b := strings.Trim(c[0], "`")
		w, ok := want[b]
		if !ok {
			t.Errorf("docs/backends.md has a row for %q, which is no backend", b)
			continue
		}
		seen[b] = true
		wp, wd := slices.Sorted(slices.Values(w.ports)), slices.Sorted(slices.Values(w.devices))
		if got := spans(c[pcol]); !slices.Equal(got, wp) {
			t.Errorf("docs/backends.md: %s's ports %v, the code's %v", b, got, wp)
		}
		if got := spans(c[dcol]); !slices.Equal(got, wd) {
			t.Errorf("docs/backends.md: %s's devices %v, the code's %v", b, got, wd)
		}
	}
	for b := range want {
		if !seen[b] {
			t.Errorf("docs/backends.md's table has no row for %s", b)
		}
	}
}

// cells splits a markdown table row into its trimmed cells.
func cells(row string) []string {
	parts := strings.Split(strings.Trim(strings.TrimSpace(row), "|"), "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}
