package firewall

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/bench/testenv"
)

func needBothBackends(t *testing.T) {
	t.Helper()
	needFirewallTools(t)
	testenv.NeedTools(t, "iptables-legacy", "iptables-legacy-save", "iptables-legacy-restore",
		"iptables-nft", "iptables-nft-save", "iptables-nft-restore")
}

// detectIn runs DetectIPTablesMode inside ns.
func detectIn(t *testing.T, ns *netns.NS) ModeDetection {
	t.Helper()
	var d ModeDetection
	inNS(t, ns, func() error {
		d = DetectIPTablesMode(context.Background())
		return nil
	})
	t.Logf("detected %s (%s): legacy %d rules, nft %d", d.Mode, d.Reason, d.Legacy, d.NFT)
	return d
}

// weftChains counts weft's chain declarations and rules in a backend's iptables-save.
func weftChains(t *testing.T, ns *netns.NS, mode IPTablesMode) (rules int) {
	t.Helper()
	for _, l := range strings.Split(sh(t, ns, mode.command("iptables", "-save")), "\n") {
		if strings.HasPrefix(l, "-A ") && (strings.Contains(l, ForwardChain) || strings.Contains(l, MasqChain)) {
			rules++
		}
	}
	return rules
}

// TestDetectIPTablesMode: in a fresh namespace the backend that holds the host's
// rules is detected (legacy when a rule was added with iptables-legacy, nft when
// with iptables-nft, the kubelet's hint chain beating a count); weft's chains
// (forward and masquerade) land in that backend only, and a later start in the
// other backend takes weft's rules out of the first.
func TestDetectIPTablesMode(t *testing.T) {
	needBothBackends(t)
	network, subnet := netip.MustParsePrefix("198.18.0.0/16"), netip.MustParsePrefix("198.18.5.0/24")

	t.Run("empty", func(t *testing.T) {
		ns := netnstest.New(t, "weft-mode")
		d := detectIn(t, ns)
		if d.Legacy != 0 || d.NFT != 0 {
			t.Errorf("a fresh namespace: legacy %d, nft %d rules; want none", d.Legacy, d.NFT)
		}
		if want := plainMode(); d.Mode != want && !(want == IPTablesPlain && d.Mode == IPTablesNFT) {
			t.Errorf("a tie: %s, want what plain iptables runs (%s), else nft", d.Mode, want)
		}
	})

	for _, tt := range []struct {
		name        string
		mode, other IPTablesMode
	}{
		{"legacy", IPTablesLegacy, IPTablesNFT},
		{"nft", IPTablesNFT, IPTablesLegacy},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ns := netnstest.New(t, "weft-mode")
			// The host's rules, as kube-proxy or a firewall leaves them.
			sh(t, ns, tt.mode.command("iptables", ""), "-w", "5", "-A", "FORWARD", "-s", "192.0.2.0/24", "-j", "ACCEPT")
			sh(t, ns, tt.mode.command("iptables", ""), "-w", "5", "-t", "nat", "-A", "POSTROUTING", "-s", "192.0.2.0/24", "-j", "RETURN")
			d := detectIn(t, ns)
			if d.Mode != tt.mode {
				t.Fatalf("detected %s, want %s", d.Mode, tt.mode)
			}
			if got := map[IPTablesMode]int{IPTablesLegacy: d.Legacy, IPTablesNFT: d.NFT}; got[tt.mode] != 2 || got[tt.other] != 0 {
				t.Errorf("counts %v, want 2 in %s and none in %s", got, tt.mode, tt.other)
			}

			opts := Options{IPTablesMode: d.Mode, Log: zaptest.NewLogger(t)}
			var fw Firewall
			inNS(t, ns, func() (err error) {
				if fw, err = New(context.Background(), false, opts); err != nil {
					return err
				}
				if err := fw.SetForward(context.Background(), network); err != nil {
					return err
				}
				return fw.SetMasq(context.Background(), network, subnet)
			})
			if fw.Backend() != tt.mode.String() {
				t.Errorf("Backend() = %q, want %q", fw.Backend(), tt.mode)
			}
			if n := weftChains(t, ns, tt.mode); n < 4 {
				t.Errorf("%d of weft's rules in %s, want its forward and masquerade rules:\n%s",
					n, tt.mode, sh(t, ns, tt.mode.command("iptables", "-save")))
			}
			if n := weftChains(t, ns, tt.other); n != 0 {
				t.Errorf("%d of weft's rules in %s, want none", n, tt.other)
			}
			// Repair works through the same backend: rules flushed there come back.
			sh(t, ns, tt.mode.command("iptables", ""), "-w", "5", "-F", ForwardChain)
			inNS(t, ns, func() error {
				repaired, err := fw.Repair(context.Background())
				if err == nil && !repaired {
					t.Error("Repair did not see the flushed chain")
				}
				return err
			})
			if n := weftChains(t, ns, tt.other); n != 0 {
				t.Errorf("Repair wrote %d rules in %s", n, tt.other)
			}

			// weftd now in the other backend (the host switched, or an older weftd wrote
			// with plain iptables): weft's rules move, nothing stays behind.
			inNS(t, ns, func() (err error) {
				moved, err := New(context.Background(), false, Options{IPTablesMode: tt.other, Log: zaptest.NewLogger(t)})
				if err != nil {
					return err
				}
				return moved.SetForward(context.Background(), network)
			})
			if n := weftChains(t, ns, tt.mode); n != 0 {
				t.Errorf("after the move %d of weft's rules stay in %s:\n%s", n, tt.mode, sh(t, ns, tt.mode.command("iptables", "-save")))
			}
			if n := weftChains(t, ns, tt.other); n == 0 {
				t.Errorf("after the move none of weft's rules in %s", tt.other)
			}
			if out := sh(t, ns, tt.mode.command("iptables", "-save")); !strings.Contains(out, "-A FORWARD -s 192.0.2.0/24 -j ACCEPT") {
				t.Errorf("the host's rule is gone from %s:\n%s", tt.mode, out)
			}
			// Cleanup removes weft's rules from every backend.
			inNS(t, ns, func() error { return RemoveAll(context.Background(), Options{Log: zaptest.NewLogger(t)}) })
			for _, m := range []IPTablesMode{tt.mode, tt.other} {
				if n := weftChains(t, ns, m); n != 0 {
					t.Errorf("after RemoveAll %d of weft's rules in %s", n, m)
				}
			}
		})
	}

	t.Run("kubelet hint", func(t *testing.T) {
		ns := netnstest.New(t, "weft-mode")
		// More rules in nft, but the kubelet's hint chain is in legacy.
		for _, s := range []string{"192.0.2.0/24", "198.51.100.0/24"} {
			sh(t, ns, "iptables-nft", "-w", "5", "-A", "FORWARD", "-s", s, "-j", "ACCEPT")
		}
		sh(t, ns, "iptables-legacy", "-w", "5", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT")
		if d := detectIn(t, ns); d.Mode != IPTablesLegacy || d.NFT != 2 {
			t.Errorf("detected %s with %d nft rules, want legacy (the kubelet's chain) and 2", d.Mode, d.NFT)
		}
	})
}

// TestTakeOverLegacy: flanneld's chains are removed from whichever backend flanneld
// wrote them with (kube-flannel's image picks the host's), here legacy.
func TestTakeOverLegacy(t *testing.T) {
	needBothBackends(t)
	ns := netnstest.New(t, "weft-fwto")
	sh(t, ns, "iptables-legacy", "-w", "5", "-t", "nat", "-N", "FLANNEL-POSTRTG")
	sh(t, ns, "iptables-legacy", "-w", "5", "-t", "nat", "-A", "POSTROUTING", "-m", "comment", "--comment", "flanneld masq", "-j", "FLANNEL-POSTRTG")
	sh(t, ns, "iptables-legacy", "-w", "5", "-N", "FLANNEL-FWD")
	sh(t, ns, "iptables-legacy", "-w", "5", "-A", "FLANNEL-FWD", "-s", "198.18.0.0/16", "-j", "ACCEPT")
	sh(t, ns, "iptables-legacy", "-w", "5", "-A", "FORWARD", "-m", "comment", "--comment", "flanneld forward", "-j", "FLANNEL-FWD")
	inNS(t, ns, func() error { return TakeOver(context.Background(), Options{Log: zaptest.NewLogger(t)}) })
	if all := sh(t, ns, "iptables-legacy-save"); strings.Contains(all, "FLANNEL") {
		t.Fatalf("TakeOver left flanneld's legacy chains:\n%s", all)
	}
}

func TestParseIPTablesMode(t *testing.T) {
	for in, want := range map[string]IPTablesMode{"legacy": IPTablesLegacy, "nft": IPTablesNFT, "plain": IPTablesPlain} {
		if got, err := ParseIPTablesMode(in); err != nil || got != want {
			t.Errorf("ParseIPTablesMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseIPTablesMode("auto"); err == nil {
		t.Error("ParseIPTablesMode(auto) succeeded")
	}
	for m, want := range map[IPTablesMode]string{IPTablesLegacy: "iptables-legacy", IPTablesNFT: "iptables-nft", IPTablesPlain: "iptables"} {
		if m.String() != want {
			t.Errorf("%q.String() = %q, want %q", string(m), m.String(), want)
		}
	}
	if got := IPTablesLegacy.command("ip6tables", "-restore"); got != "ip6tables-legacy-restore" {
		t.Errorf("command = %q", got)
	}
}

func TestCountRules(t *testing.T) {
	save := []byte(`# Generated by iptables-save v1.8.9
*mangle
:PREROUTING ACCEPT [0:0]
:KUBE-IPTABLES-HINT - [0:0]
COMMIT
*filter
:FORWARD ACCEPT [0:0]
-A FORWARD -s 192.0.2.0/24 -j ACCEPT
-A FORWARD -d 192.0.2.0/24 -j ACCEPT
COMMIT
# Warning: iptables-legacy tables present, use iptables-legacy-save to see them
`)
	if n := countRules(save); n != 2 {
		t.Errorf("countRules = %d, want 2", n)
	}
	if !hasKubeletChain(save) {
		t.Error("hasKubeletChain missed KUBE-IPTABLES-HINT")
	}
	if hasKubeletChain([]byte("-A FORWARD -m comment --comment KUBE-IPTABLES-HINT -j ACCEPT\n")) {
		t.Error("hasKubeletChain took a rule's comment for the chain")
	}
}
