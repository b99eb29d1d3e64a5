package bench

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/weftnet/weft/lease"
)

func TestParseVmRSS(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		err  error
	}{
		{"Name:\tweftd\nVmRSS:\t   46080 kB\nRssAnon: 1 kB\n", 45, nil},
		{"VmRSS:\t1024 kB", 1, nil},
		{"Name:\tkthreadd\n", 0, ErrNoVmRSS},
		{"VmRSS:\t12 MB\n", 0, ErrNoVmRSS},
		{"VmRSS:\tx kB\n", 0, ErrNoVmRSS},
	} {
		got, err := ParseVmRSS(tc.in)
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("ParseVmRSS(%q) = %v, %v; want %v, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestScaleSubnetLen(t *testing.T) {
	for _, tc := range []struct{ n, want int }{{100, 24}, {300, 25}, {1000, 27}, {3000, 28}, {5000, 29}, {7000, 29}, {7500, 30}} {
		if got := scaleSubnetLen(tc.n); got != tc.want {
			t.Errorf("scaleSubnetLen(%d) = /%d, want /%d", tc.n, got, tc.want)
		}
		c := overlayCfg{network: netip.MustParsePrefix("198.18.0.0/16"), bits: scaleSubnetLen(tc.n)}
		if c.count()-1 < tc.n {
			t.Errorf("%d hosts: /%d has only %d subnets", tc.n, c.bits, c.count())
		}
	}
}

func TestOverlaySubnet(t *testing.T) {
	c := overlayCfg{network: netip.MustParsePrefix("198.18.0.0/16"), bits: 29}
	for i, want := range map[int]string{0: "198.18.0.0/29", 1: "198.18.0.8/29", 32: "198.18.1.0/29", 8191: "198.18.255.248/29"} {
		if got := c.subnet(i).String(); got != want {
			t.Errorf("subnet(%d) = %s, want %s", i, got, want)
		}
	}
}

func TestSimValue(t *testing.T) {
	v := simValue("vxlan", false, 258)
	if !strings.Contains(v, `"PublicIP":"192.0.2.203"`) || !strings.Contains(v, `"VtepMAC":"02:5e:00:00:01:02"`) {
		t.Errorf("simValue(vxlan, 258) = %s", v)
	}
	if v := simValue("host-gw", false, 155); !strings.Contains(v, `"PublicIP":"192.0.2.100"`) || strings.Contains(v, "BackendData") {
		t.Errorf("simValue(host-gw, 155) = %s", v)
	}
	// wireguard: a key of its own (decoded as weftd decodes a peer's), a site with sites.
	for _, sites := range []bool{false, true} {
		v := simValue("wireguard", sites, 7)
		var a lease.Attrs
		if err := json.Unmarshal([]byte(v), &a); err != nil {
			t.Fatalf("simValue(wireguard, %v, 7) = %s: %v", sites, v, err)
		}
		var bd struct{ PublicKey string }
		if err := json.Unmarshal(a.BackendData, &bd); err != nil {
			t.Fatalf("simValue(wireguard, %v, 7) = %s: %v", sites, v, err)
		}
		if k, err := base64.StdEncoding.DecodeString(bd.PublicKey); err != nil || len(k) != 32 {
			t.Errorf("simValue(wireguard, %v, 7) = %s: key %q (%v)", sites, v, bd.PublicKey, err)
		}
		if (a.Site == simSite) != sites || a.Site == simHome {
			t.Errorf("simValue(wireguard, %v, 7) = %s: site %q", sites, v, a.Site)
		}
		if other := simValue("wireguard", sites, 8); other == v {
			t.Errorf("two simulated hosts share a lease value: %s", v)
		}
	}
}

func TestScaleReportFiles(t *testing.T) {
	r := &ScaleReport{Backend: "vxlan", Network: "198.18.0.0/16", SubnetLen: 29, Rate: 50, ChurnS: 60, IdleS: 10,
		Points: []ScalePoint{
			{Subject: "weftd", Hosts: 100, ScaleReady: ScaleReady{ReadyS: 0.1, PeersSeen: true, RSSMiB: 40},
				ScaleChurn: ScaleChurn{ChurnOps: 10, P50Ms: 2, P99Ms: 9}, ScaleRecovery: ScaleRecovery{ResyncsChurn: 0, ResyncsRestart: 1}},
			{Subject: "weftd", Hosts: 5000, ScaleReady: ScaleReady{ReadyS: 2, PeersSeen: true, RSSMiB: 60},
				ScaleChurn: ScaleChurn{ChurnOps: 10, P50Ms: 20, P99Ms: 90}, ScaleRecovery: ScaleRecovery{ResyncsChurn: 0, ResyncsRestart: 1}},
			{Subject: "flanneld", Hosts: 5000, ScaleReady: ScaleReady{ReadyS: 3, PeersSeen: true, RSSMiB: 50},
				ScaleChurn: ScaleChurn{ChurnOps: 10, P50Ms: 3, P99Ms: 30}, ScaleRecovery: ScaleRecovery{ResyncsChurn: -1, ResyncsRestart: -1},
				Errors: []string{"boom\nmore"}},
		}}
	var md, svg, tbl bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteTable(&tbl); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| weftd | 5000 | 2.00 | 60.0 |", "flanneld (failed)", "flanneld at 5000: boom\n", "/29 subnets"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Count(svg.String(), "<polyline") != 3 || !strings.HasSuffix(svg.String(), "</svg>\n") {
		t.Errorf("svg: want one line per panel for weftd (two points), got:\n%s", svg.String())
	}
	if !strings.Contains(tbl.String(), "flanneld at 5000: boom\n") {
		t.Errorf("table lacks the error:\n%s", tbl.String())
	}
}

// machinePath is an absolute path in a report file: a slash at the start of the text or
// after a space, quote, bracket, '=' or '>' and then a letter, '.' or '_' (a prefix
// length such as "/29" and a URL's "//" are not paths). /proc, /sys and /dev are the
// kernel's and allowed.
var machinePath = regexp.MustCompile(`(^|[\s"'(\[=>])/[A-Za-z_.][^\s"'<():,;\]]*`)

// TestScaleReportNoMachinePaths: the files a scale run writes (committed under
// docs/scale/) hold no path of the machine that made them: the daemon binaries by base
// name, absolute paths in errors by base name; a URL, a prefix length and /proc stay.
func TestScaleReportNoMachinePaths(t *testing.T) {
	r := &ScaleReport{Backend: "vxlan", Network: "198.18.0.0/16", SubnetLen: 29, Rate: 50, ChurnS: 60, IdleS: 10,
		Points: []ScalePoint{
			{Subject: "weftd", Binary: "/work/wt/scale/bin/weftd", Hosts: 100,
				ScaleReady: ScaleReady{ReadyS: 0.1, PeersSeen: true}, ScaleChurn: ScaleChurn{ChurnOps: 10, P99Ms: 9}},
			{Subject: "flanneld", Binary: "bin/flanneld", Hosts: 100,
				ScaleReady: ScaleReady{ReadyS: 0.2, PeersSeen: true}, ScaleChurn: ScaleChurn{ChurnOps: 10, P99Ms: 9}},
			{Subject: "other", Binary: "/home/u/flanneld-0.27", Hosts: 100, Errors: []string{
				"fork/exec /root/go/bin/other: permission denied",
				`open "/tmp/weft-bench-123/h0/daemon.log": no such file`,
				"scale: 5000 hosts do not fit in 198.18.0.0/16 with /29 subnets",
				"etcd at http://127.0.0.1:2379: read /proc/42/status (rss=/home/u/x)",
			}},
		}}
	dir := t.TempDir()
	if err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, name := range []string{"scale.md", "scale.json", "scale.svg"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range machinePath.FindAllString(string(data), -1) {
			p := strings.TrimLeft(m, " \t\n\"'([=>")
			if !strings.HasPrefix(p, "/proc/") && !strings.HasPrefix(p, "/sys/") && !strings.HasPrefix(p, "/dev/") {
				t.Errorf("%s holds the absolute path %q", name, p)
			}
		}
		all.Write(data)
	}
	for _, want := range []string{`"binary": "weftd"`, `"binary": "flanneld"`, `"binary": "flanneld-0.27"`,
		"fork/exec other: permission denied", `open \"daemon.log\"`, "with /29 subnets",
		"http://127.0.0.1:2379", "/proc/42/status", "rss=x"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("the report files lack %q", want)
		}
	}
	if r.Points[0].Binary != "/work/wt/scale/bin/weftd" {
		t.Errorf("writing the files changed the report itself: %q", r.Points[0].Binary)
	}
	var tbl bytes.Buffer
	if err := r.WriteTable(&tbl); err != nil || !strings.Contains(tbl.String(), "/root/go/bin/other") {
		t.Errorf("the terminal table should keep the whole path: %v\n%s", err, tbl.String())
	}
}

// TestScaleReportProbeColumn: the table has the probe packets' column (after idle
// CPU) only when a daemon probed, so reports of earlier runs render as they were.
func TestScaleReportProbeColumn(t *testing.T) {
	pt := func(name string, pkts float64) ScalePoint {
		return ScalePoint{Subject: name, Hosts: 5000, ScaleReady: ScaleReady{ReadyS: 2, PeersSeen: true, RSSMiB: 66, IdleCPUPct: 0.19, ProbePktsPerS: pkts}}
	}
	for _, tc := range []struct {
		name   string
		points []ScalePoint
		want   []string
		unwant []string
	}{
		{"none probed", []ScalePoint{pt("weftd", 0)},
			[]string{"| idle CPU % | update p50 ms |", "| weftd | 5000 | 2.00 | 66.0 | 0.19 | — |", "nothing is ever sent to them"},
			[]string{"probe pkts/s", "weft_probe_packets_sent_total"}},
		{"one probed", []ScalePoint{pt("weftd", 249.96), pt("weftd-noprobe", 0)},
			[]string{"| idle CPU % | probe pkts/s | update p50 ms |", "| weftd | 5000 | 2.00 | 66.0 | 0.19 | 250.0 | — |",
				"| weftd-noprobe | 5000 | 2.00 | 66.0 | 0.19 | 0.0 | — |", "weft_probe_packets_sent_total over the idle window",
				"weftd's peer probes go unanswered"},
			[]string{"nothing is ever sent to them"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &ScaleReport{Backend: "vxlan", Network: "198.18.0.0/16", SubnetLen: 29, Rate: 50, ChurnS: 10, IdleS: 180, Points: tc.points}
			var md bytes.Buffer
			if err := r.WriteMarkdown(&md); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(md.String(), w) {
					t.Errorf("markdown lacks %q:\n%s", w, md.String())
				}
			}
			for _, w := range tc.unwant {
				if strings.Contains(md.String(), w) {
					t.Errorf("markdown has %q:\n%s", w, md.String())
				}
			}
		})
	}
}
