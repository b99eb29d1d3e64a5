package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// fixedReport: three reps for the references and weftd-udp, one failed subject.
func fixedReport() *Report {
	r := &Report{Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Reps: 3, DurationS: 5}
	r.Rows = []Row{
		{Subject: Underlay, Kind: KindReference, Reps: []Figures{
			{TCPGbps: 20, UDPKpps: 400, RTTMedian: 50}, {TCPGbps: 22, UDPKpps: 300, RTTMedian: 40}, {TCPGbps: 18, UDPKpps: 500, RTTMedian: 60}}},
		{Subject: KernelVXLAN, Kind: KindReference, Reps: []Figures{
			{TCPGbps: 10, UDPKpps: 200, RTTMedian: 100}, {TCPGbps: 12, UDPKpps: 100, RTTMedian: 80}, {TCPGbps: 8, UDPKpps: 300, RTTMedian: 120}}},
		{Subject: "weftd-udp", Kind: KindWeft, Reps: []Figures{
			{TCPGbps: 5, UDPKpps: 150, RTTMedian: 150, CPUPerGBs: 2}, {TCPGbps: 6, UDPKpps: 50, RTTMedian: 100, CPUPerGBs: 4},
			{TCPGbps: 4, UDPKpps: 100, RTTMedian: 200}}},
		{Subject: "weftd-vxlan", Kind: KindWeft, Errors: []string{"subject weftd-vxlan: daemon exited\nlog tail"}},
	}
	r.Finish()
	return r
}

func TestFinishMediansAndRatios(t *testing.T) {
	r := fixedReport()
	for _, tc := range []struct {
		subject string
		f       func(*Row) Figures
		key     string
		want    float64
		present bool
	}{
		{Underlay, func(r *Row) Figures { return r.Median }, TCPGbps, 20, true},
		{KernelVXLAN, func(r *Row) Figures { return r.Median }, UDPKpps, 200, true},
		{"weftd-udp", func(r *Row) Figures { return r.Median }, CPUPerGBs, 3, true}, // two reps had it
		{"weftd-udp", func(r *Row) Figures { return r.VsKernelVXLAN }, TCPGbps, 0.5, true},
		{"weftd-udp", func(r *Row) Figures { return r.VsUnderlay }, TCPGbps, 0.25, true},
		{"weftd-udp", func(r *Row) Figures { return r.VsKernelVXLAN }, RTTMedian, 1.5, true},
		{"weftd-udp", func(r *Row) Figures { return r.VsKernelVXLAN }, CPUPerGBs, 0, false}, // no daemon in kvxlan
		{KernelVXLAN, func(r *Row) Figures { return r.VsKernelVXLAN }, UDPKpps, 1, true},
		{Underlay, func(r *Row) Figures { return r.VsKernelVXLAN }, TCPGbps, 2, true},
		{"weftd-vxlan", func(r *Row) Figures { return r.Median }, TCPGbps, 0, false},
	} {
		got, ok := tc.f(r.Row(tc.subject))[tc.key]
		if ok != tc.present || !near(got, tc.want) {
			t.Errorf("%s %s = %v (present %v), want %v (present %v)", tc.subject, tc.key, got, ok, tc.want, tc.present)
		}
	}
	if r.Row("nope") != nil {
		t.Error("Row of an unknown subject")
	}
	// Without reference rows there are no ratios.
	r2 := &Report{Rows: []Row{{Subject: "x", Reps: []Figures{{TCPGbps: 1}}}}}
	r2.Finish()
	if r2.Rows[0].VsKernelVXLAN != nil || r2.Rows[0].VsUnderlay != nil {
		t.Errorf("ratios without references: %+v", r2.Rows[0])
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := fixedReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	// header, rule, 4 rows, 1 error line
	if len(lines) != 7 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	for _, want := range []string{"weftd-udp", "5.00", "0.50x", "0.25x", "weftd-vxlan (failed)", "weftd-vxlan: subject weftd-vxlan: daemon exited"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "log tail") {
		t.Errorf("table shows more than an error's first line:\n%s", out)
	}
	// Columns line up: every row is as wide as the header.
	w := len([]rune(lines[0]))
	for _, l := range lines[1:6] {
		if len([]rune(l)) != w {
			t.Errorf("row width %d, header %d: %q", len([]rune(l)), w, l)
		}
	}
}

func TestWriteMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := fixedReport().WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"# weft benchmark", "2026-01-02T03:04:05Z", "| subject | TCP Gbit/s |",
		"| weftd-udp | 5.00 | 0.50x | 0.25x |", "| weftd-udp | underlay | 0.25x |", "## Errors",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	// Every table line has as many cells as its header.
	var cols int
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "|") {
			cols = 0
			continue
		}
		n := strings.Count(l, "|")
		if cols == 0 {
			cols = n
		} else if n != cols {
			t.Errorf("%d cells, header %d: %q", n, cols, l)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	r := fixedReport()
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != 4 || back.Rows[2].Median[TCPGbps] != 5 || back.Rows[2].VsKernelVXLAN[TCPGbps] != 0.5 ||
		len(back.Rows[3].Errors) != 1 || !back.Started.Equal(r.Started) {
		t.Errorf("round trip: %+v", back)
	}
}

func TestWriteSVG(t *testing.T) {
	r := fixedReport()
	r.Rows[2].Subject = "weft<&>"
	var b bytes.Buffer
	if err := r.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	// Well-formed XML, one bar per subject per panel (plus background and legend).
	svg := b.String()
	d := xml.NewDecoder(&b)
	rects, texts := 0, 0
	var widths []string
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "rect":
				rects++
				for _, a := range se.Attr {
					if a.Name.Local == "width" && rects > 1 && rects <= 1+2*len(r.Rows) {
						widths = append(widths, a.Value)
					}
				}
			case "text":
				texts++
			}
		}
	}
	if want := 1 + 2*len(r.Rows) + 3; rects != want {
		t.Errorf("%d rects, want %d", rects, want)
	}
	// The longest bar in each panel is the underlay's, full width; the failed row is empty.
	if widths[0] != "430.0" || widths[3] != "0.0" || widths[4] != "430.0" {
		t.Errorf("bar widths %v", widths)
	}
	if !strings.Contains(svg, "weft&lt;&amp;&gt;") || texts < 2*len(r.Rows) {
		t.Errorf("%d texts, subject name escaped: %v", texts, strings.Contains(svg, "weft&lt;&amp;&gt;"))
	}
}

func TestOrder(t *testing.T) {
	const n = 5
	first := map[int]bool{}
	for rep := 0; rep < 4; rep++ {
		o := Order(n, rep)
		seen := map[int]bool{}
		for _, i := range o {
			if i < 0 || i >= n || seen[i] {
				t.Fatalf("rep %d: order %v is no permutation", rep, o)
			}
			seen[i] = true
		}
		first[o[0]] = true
	}
	if len(first) < 3 {
		t.Errorf("first subjects over 4 reps: %v; the order does not alternate", first)
	}
}

func TestOrderPositions(t *testing.T) {
	const n = 4
	// Over n reps every subject takes every position once.
	for pos := 0; pos < n; pos++ {
		seen := map[int]bool{}
		for rep := 0; rep < n; rep++ {
			seen[Order(n, rep)[pos]] = true
		}
		if len(seen) != n {
			t.Errorf("position %d held by %v over %d reps", pos, seen, n)
		}
	}
}

// TestFamilyReport: an IPv6 report says so in every form, and a row that cannot carry
// IPv6 is marked n/a with its reason, not failed and not missing.
func TestFamilyReport(t *testing.T) {
	r := fixedReport()
	r.Family = 6
	r.Rows = append(r.Rows, Row{Subject: "flanneld", Kind: KindDaemon, NotApplicable: "IPv4-only: flannel's udp backend carries no IPv6"})
	r.Finish()
	var table, md, svg, js bytes.Buffer
	if err := errors.Join(r.WriteTable(&table), r.WriteMarkdown(&md), r.WriteSVG(&svg), r.WriteJSON(&js)); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"table": table.String(), "markdown": md.String(), "svg": svg.String()} {
		if !strings.Contains(out, "IPv6") {
			t.Errorf("%s does not say IPv6:\n%s", name, out)
		}
	}
	for name, out := range map[string]string{"table": table.String(), "markdown": md.String()} {
		if !strings.Contains(out, "flanneld (n/a)") || !strings.Contains(out, "flanneld: n/a: IPv4-only") {
			t.Errorf("%s does not mark flanneld n/a with its reason:\n%s", name, out)
		}
		if strings.Contains(out, "flanneld (failed)") {
			t.Errorf("%s calls the n/a row failed:\n%s", name, out)
		}
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Family != 6 || back.Row("flanneld").NotApplicable == "" {
		t.Errorf("JSON lost the family or the n/a reason: family %d, row %+v", back.Family, back.Row("flanneld"))
	}
	r.Family = 4
	var v4 bytes.Buffer
	if err := r.WriteTable(&v4); err != nil || strings.HasPrefix(v4.String(), "IPv6") {
		t.Errorf("an IPv4 report is titled IPv6 (%v):\n%s", err, v4.String())
	}
}
