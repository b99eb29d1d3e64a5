package daemon

import (
	"encoding/json"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/factory"
	"github.com/weftnet/weft/lease"
)

// Docs that the tests below hold to the code, both ways.
const (
	opsDoc      = "../docs/operations.md"
	securityDoc = "../SECURITY.md"
)

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docTable returns the rows of the Markdown table in doc whose header line is
// header, each split into cells (a | inside a code span does not split).
func docTable(t *testing.T, doc, header string) [][]string {
	t.Helper()
	lines := strings.Split(doc, "\n")
	start := slices.Index(lines, header)
	if start < 0 || start+1 >= len(lines) || !strings.HasPrefix(lines[start+1], "|--") {
		t.Fatalf("no table with the header %q", header)
	}
	var rows [][]string
	for _, l := range lines[start+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		var cells []string
		var cell strings.Builder
		code := false
		for _, c := range strings.TrimPrefix(strings.TrimSpace(l), "|") {
			switch {
			case c == '`':
				code = !code
				cell.WriteRune(c)
			case c == '|' && !code:
				cells = append(cells, strings.TrimSpace(cell.String()))
				cell.Reset()
			default:
				cell.WriteRune(c)
			}
		}
		rows = append(rows, cells)
	}
	return rows
}

// outsideParens is s without its parenthesised parts (nested ones too).
func outsideParens(s string) string {
	var b strings.Builder
	depth := 0
	for _, c := range s {
		switch {
		case c == '(':
			depth++
		case c == ')' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(c)
		}
	}
	return b.String()
}

var (
	codeSpan   = regexp.MustCompile("`([^`]+)`")
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

// codeSpans returns the contents of the code spans in s.
func codeSpans(s string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestMetricsDocumented: docs/operations.md's metric table names every metric GET
// /metrics serves (all but the Go runtime's go_* and the process' process_*), each
// once and with its labels, and no metric weftd does not serve.
func TestMetricsDocumented(t *testing.T) {
	served := servedMetrics(t)
	for name := range served {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			delete(served, name)
		}
	}
	if len(served) < 20 {
		t.Fatalf("only %d weft_* metrics described: %v", len(served), served)
	}

	documented := map[string]int{}
	for _, row := range docTable(t, readDoc(t, opsDoc), "| metric | type | labels | meaning | sample query |") {
		if len(row) < 3 {
			t.Errorf("metric table row %q: want at least 3 cells", row)
			continue
		}
		names := codeSpans(row[0])
		if len(names) == 0 {
			t.Errorf("metric table row %q names no `metric`", row[0])
		}
		labels := codeSpans(outsideParens(row[2]))
		for _, name := range names {
			documented[name]++
			want, ok := served[name]
			if !ok {
				t.Errorf("docs/operations.md lists the metric %s, which GET /metrics does not serve", name)
				continue
			}
			if !sameSet(labels, want) {
				t.Errorf("docs/operations.md gives %s the labels %q; weftd's are %q", name, labels, want)
			}
		}
	}
	for name := range served {
		switch documented[name] {
		case 0:
			t.Errorf("docs/operations.md's metric table lacks %s", name)
		case 1:
		default:
			t.Errorf("docs/operations.md's metric table lists %s %d times", name, documented[name])
		}
	}
}

// getPath is an endpoint named in prose: GET /healthz.
var getPath = regexp.MustCompile("`GET (/[a-z]+)")

// TestHealthEndpointsDocumented: the health port's endpoints are those that the
// --healthz-port row of docs/operations.md's flag table and SECURITY.md's health port
// item name, and docs/operations.md names no GET endpoint weftd lacks.
func TestHealthEndpointsDocumented(t *testing.T) {
	var served []string
	for path := range (&daemon{cfg: &Config{}, log: zap.NewNop()}).healthzRoutes() {
		served = append(served, path)
	}
	ops := readDoc(t, opsDoc)

	var row []string
	for _, r := range docTable(t, ops, "| flag | default | meaning |") {
		if strings.Contains(r[0], "`--healthz-port`") {
			row = r
		}
	}
	if row == nil {
		t.Fatal("docs/operations.md's flag table has no --healthz-port row")
	}
	var inRow []string
	for _, m := range getPath.FindAllStringSubmatch(strings.Join(row, " "), -1) {
		inRow = append(inRow, m[1])
	}
	if !sameSet(inRow, served) {
		t.Errorf("docs/operations.md's --healthz-port row names %q; the health port serves %q", inRow, served)
	}
	for _, m := range getPath.FindAllStringSubmatch(ops, -1) {
		if !slices.Contains(served, m[1]) {
			t.Errorf("docs/operations.md names GET %s, which the health port does not serve", m[1])
		}
	}

	sec := readDoc(t, securityDoc)
	_, item, ok := strings.Cut(sec, "**The health port** (")
	if !ok {
		t.Fatal("SECURITY.md has no **The health port** (...) item")
	}
	item, _, _ = strings.Cut(item, ")")
	_, list, _ := strings.Cut(item, ":")
	if inSec := codeSpans(list); !sameSet(inSec, served) {
		t.Errorf("SECURITY.md's health port item names %q; the health port serves %q", inSec, served)
	}
}

// TestCleanupDevicesDocumented: docs/operations.md's `weftd cleanup` section names
// exactly the devices removeDevices deletes, weftDevice takes each of them and no
// other name, and those are the names the backends give their devices.
func TestCleanupDevicesDocumented(t *testing.T) {
	var code []string
	for _, d := range cleanupDevices {
		code = append(code, d.Name)
	}
	_, sec, ok := strings.Cut(readDoc(t, opsDoc), "## Taking weft off a host: `weftd cleanup`")
	if !ok {
		t.Fatal("docs/operations.md has no cleanup section")
	}
	_, list, ok := strings.Cut(sec, "It deletes the devices ")
	if !ok {
		t.Fatal(`docs/operations.md's cleanup section no longer says "It deletes the devices ..."`)
	}
	list, _, _ = strings.Cut(list, "(")
	if doc := codeSpans(list); !sameSet(doc, code) {
		t.Errorf("docs/operations.md says cleanup deletes the devices %q; removeDevices deletes %q", doc, code)
	}

	for _, d := range cleanupDevices {
		name := strings.ReplaceAll(d.Name, "<VNI>", "4096")
		for _, typ := range d.Types {
			if _, ok := weftDevice(name, typ); !ok {
				t.Errorf("weftDevice(%q, %q) is false", name, typ)
			}
		}
		if _, ok := weftDevice(name, "bridge"); ok {
			t.Errorf("weftDevice(%q, bridge) is true", name)
		}
	}
	for _, name := range []string{"flannel1", "cni0", "eth0", "flannel-wg0", "wg0"} {
		for _, typ := range []string{"tuntap", "vxlan", "wireguard"} {
			if _, ok := weftDevice(name, typ); ok {
				t.Errorf("weftDevice(%q, %q) is true", name, typ)
			}
		}
	}

	// The backends' names: udp's and wireguard's constants, vxlan's as its errors
	// name the devices it would make (VNI 7).
	made := []string{factory.UDPDevice, factory.WireGuardDevice, factory.WireGuardDeviceV6}
	cfg := &lease.Config{EnableIPv4: true, Network: netip.MustParsePrefix("198.18.0.0/16"), SubnetLen: 24,
		EnableIPv6: true, IPv6Network: netip.MustParsePrefix("fd00::/48"), IPv6SubnetLen: 64,
		BackendType: "vxlan", Backend: json.RawMessage(`{"Type":"vxlan","VNI":7,"MTU":100}`)}
	_, err := factory.New(cfg, encap.ExternalInterface{MTU: 1500}, factory.Tuning{}, zap.NewNop())
	made = append(made, vxlanDevice(t, err, "flannel."))
	cfg.Backend = json.RawMessage(`{"Type":"vxlan","VNI":7}`)
	_, err = factory.New(cfg, encap.ExternalInterface{MTU: 1500}, factory.Tuning{}, zap.NewNop())
	made = append(made, vxlanDevice(t, err, "flannel-v6."))
	for _, name := range made {
		if !slices.ContainsFunc(code, func(c string) bool {
			return c == name || strings.ReplaceAll(c, "<VNI>", "7") == name
		}) {
			t.Errorf("a backend makes %s, which cleanupDevices lacks", name)
		}
	}
}

// vxlanDevice finds the device name with prefix and VNI 7 in a vxlan backend's error.
func vxlanDevice(t *testing.T, err error, prefix string) string {
	t.Helper()
	if err == nil {
		t.Fatalf("the vxlan backend took a config it should refuse (naming %s<VNI>)", prefix)
	}
	m := regexp.MustCompile(regexp.QuoteMeta(prefix) + `[0-9]+`).FindString(err.Error())
	if m != prefix+strconv.Itoa(7) {
		t.Fatalf("the vxlan backend's error %q no longer names %s7", err, prefix)
	}
	return m
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
