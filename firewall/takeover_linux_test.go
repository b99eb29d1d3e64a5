package firewall

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/netnstest"
)

// flanneldRules is what flanneld v0.28 leaves on a host with --ip-masq (iptables),
// beside another tool's rule that must survive.
const flanneldRules = `*nat
:FLANNEL-POSTRTG - [0:0]
-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG
-A POSTROUTING -s 192.0.2.0/24 -j RETURN
-A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN
-A FLANNEL-POSTRTG -s 198.18.0.0/16 ! -d 224.0.0.0/4 -m comment --comment "flanneld masq" -j MASQUERADE
COMMIT
*filter
:FLANNEL-FWD - [0:0]
-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD
-A FLANNEL-FWD -s 198.18.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT
-A FLANNEL-FWD -d 198.18.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT
COMMIT
`

// TestTakeOver: a host switched from flanneld keeps none of flanneld's chains, jumps or
// nftables table after TakeOver, and everything else (another tool's rule, weft's
// own rules) stays; a second TakeOver finds nothing to do.
func TestTakeOver(t *testing.T) {
	needFirewallTools(t)
	ns := netnstest.New(t, "weft-fwto")
	rules := filepath.Join(t.TempDir(), "rules")
	if err := os.WriteFile(rules, []byte(flanneldRules), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, ns, "sh", "-c", "iptables-restore --noflush < "+rules)
	sh(t, ns, "nft", "add table ip flannel-ipv4; add chain ip flannel-ipv4 postrtg { type nat hook postrouting priority srcnat; }")
	fw := newFW(t, ns, false, false)
	inNS(t, ns, func() error {
		return fw.SetForward(context.Background(), netip.MustParsePrefix("198.18.0.0/16"))
	})
	for i := 0; i < 2; i++ {
		inNS(t, ns, func() error { return TakeOver(context.Background(), Options{Log: zaptest.NewLogger(t)}) })
		all := sh(t, ns, "iptables-save")
		if strings.Contains(all, "FLANNEL") || strings.Contains(all, "flanneld") {
			t.Fatalf("TakeOver %d left flanneld's rules:\n%s", i+1, all)
		}
		if !strings.Contains(all, "-A POSTROUTING -s 192.0.2.0/24 -j RETURN") {
			t.Fatalf("TakeOver %d removed another tool's rule:\n%s", i+1, all)
		}
		if jumps, got := forwardView(t, ns, false); jumps != 1 || len(got) != 2 {
			t.Fatalf("TakeOver %d touched weft's forward rules: %d jumps, rules %q", i+1, jumps, got)
		}
		if tables := sh(t, ns, "nft", "list", "tables"); strings.Contains(tables, "flannel-ipv4") {
			t.Fatalf("TakeOver %d left flanneld's nftables table:\n%s", i+1, tables)
		}
	}
}
