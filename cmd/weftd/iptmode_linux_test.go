package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/firewall"
)

// scrapeMetrics reads weftd's /metrics on port from inside ns.
func scrapeMetrics(t *testing.T, ns *netns.NS, port int) string {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: ns.DialContext}, Timeout: 10 * time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://192.0.2.10:%d/metrics", port))
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s %v", resp.Status, err)
	}
	return string(body)
}

// weftRules counts weft's rules (forward and masquerade chains) in cmd's iptables-save.
func weftRules(t *testing.T, ns *netns.NS, cmd string) int {
	t.Helper()
	out, err := ns.Run(context.Background(), cmd)
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "-A ") && (strings.Contains(l, firewall.ForwardChain) || strings.Contains(l, firewall.MasqChain)) {
			n++
		}
	}
	return n
}

// TestWeftdIPTablesMode runs the real weftd (etcd mode, alloc backend, --ip-masq and the
// forward rules) on a host whose rules are in one iptables backend: weftd detects it,
// says so in its log and in weft_firewall_info, and writes its chains there and not in
// the other. With EnableNFTables its rules are the nftables table, in neither backend.
// --iptables-mode forces a backend over what detection would pick.
func TestWeftdIPTablesMode(t *testing.T) {
	testenv.NeedTools(t, "iptables-legacy", "iptables-legacy-save", "iptables-nft", "iptables-nft-save", "nft")
	const network = `"Network":"198.18.0.0/16","Backend":{"Type":"alloc"}`
	for _, tt := range []struct {
		name      string
		hostRules string   // the command the host's rule is added with
		nft       bool     // EnableNFTables
		flags     []string // more weftd flags
		backend   string   // weft_firewall_info's label
	}{
		{name: "legacy", hostRules: "iptables-legacy", backend: "iptables-legacy"},
		{name: "nft", hostRules: "iptables-nft", backend: "iptables-nft"},
		{name: "forced", hostRules: "iptables-nft", flags: []string{"--iptables-mode=legacy"}, backend: "iptables-legacy"},
		{name: "EnableNFTables", hostRules: "iptables-legacy", nft: true, backend: "nftables"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ns := hostNS(t)
			if _, err := ns.Run(context.Background(), tt.hostRules, "-w", "5", "-A", "FORWARD", "-s", "192.0.2.0/24", "-j", "ACCEPT"); err != nil {
				t.Fatal(err)
			}
			prefix := "/weft-iptmode/net"
			config := "{" + network
			if tt.nft {
				config += `,"EnableNFTables":true`
			}
			endpoint := plainEtcdIn(t, ns, prefix, config+"}")
			port := freeTCPPort(t)
			p := startWeftd(t, ns, append([]string{"--etcd-endpoints=" + endpoint, "--etcd-prefix=" + prefix,
				"--ip-masq", "--iptables-forward-rules=true", fmt.Sprintf("--healthz-port=%d", port)}, tt.flags...)...)
			l, at := p.await(t, "the firewall rules", func(l logLine) bool { return l.str("msg") == "firewall rules" })
			t.Logf("weftd wrote its rules with %s after %v", l.str("backend"), at)
			if l.str("backend") != tt.backend {
				t.Errorf("weftd logged backend %q, want %q", l.str("backend"), tt.backend)
			}
			if !tt.nft && len(tt.flags) == 0 {
				d, _ := p.await(t, "the detected mode", func(l logLine) bool { return l.str("msg") == "iptables mode detected" })
				t.Logf("detection: %v", d)
			}
			// The log line comes before the rules are written, and there is no event for
			// "written": poll until the metric says the firewall is set up and its rules are
			// all there (forward: two, masquerade: four).
			want := fmt.Sprintf(`weft_firewall_info{backend=%q} 1`, tt.backend)
			var in map[string]int
			var metrics string
			deadline := time.Now().Add(30 * time.Second)
			for {
				metrics = scrapeMetrics(t, ns, port)
				in = map[string]int{}
				for _, cmd := range []string{"iptables-legacy-save", "iptables-nft-save"} {
					in[cmd] = weftRules(t, ns, cmd)
				}
				if strings.Contains(metrics, want+"\n") && (tt.nft || in[tt.backend+"-save"] >= 6) || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if !strings.Contains(metrics, want+"\n") {
				t.Errorf("/metrics lacks %s:\n%s", want, grepLines(metrics, "weft_firewall"))
			}
			for cmd, n := range in {
				if mine := cmd == tt.backend+"-save"; mine && n < 6 || !mine && n != 0 {
					t.Errorf("%d of weft's rules in %s (all: %v); want them in %s only", n, cmd, in, tt.backend)
				}
			}
			tables, err := ns.Run(context.Background(), "nft", "list", "tables")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(tables, "table ip "+firewall.NFTTable+"\n"); got != tt.nft {
				t.Errorf("table ip %s present %v, want %v:\n%s", firewall.NFTTable, got, tt.nft, tables)
			}
		})
	}
}

// grepLines keeps the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// freeTCPPort returns a loopback TCP port free a moment ago.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
