package factory

import (
	"errors"
	"net/netip"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// TestCheckIsNew: Check refuses what New refuses, with New's words, and says what each
// backend does; an unknown option is named strict-options, ipip and ipsec say flanneld
// runs them.
func TestCheckIsNew(t *testing.T) {
	ext := encap.ExternalInterface{Name: "eth0", MTU: 1500, IfaceIP: netip.MustParseAddr("192.0.2.10"),
		IfaceIPv6: netip.MustParseAddr("2001:db8::10")}
	for _, c := range []struct {
		name, conf string
		diff       string // a difference Check must name
		unknown    bool   // the error is an unknown option
	}{
		{"udp", `{"Network":"198.18.0.0/16","Backend":{"Type":"udp","MTU":1400}}`, "udp-mtu-option", false},
		{"udp BusyPoll", `{"Network":"198.18.0.0/16","Backend":{"Type":"UDP","BusyPoll":"20us"}}`, "`BusyPoll` and `Workers`", false},
		{"udp bad BusyPoll", `{"Network":"198.18.0.0/16","Backend":{"Type":"udp","BusyPoll":"1h"}}`, "", false},
		{"vxlan", `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan","VNI":3}}`, "vxlan-local", false},
		{"vxlan port 0", `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan","Port":0}}`, "", false},
		{"vxlan VNI too big", `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan","VNI":16777216}}`, "", false},
		{"vxlan given twice", `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan","VNI":3,"vni":4}}`, "", false},
		{"vxlan unknown", `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan","Nope":3}}`, "strict-options", true},
		{"host-gw", `{"Network":"198.18.0.0/16","Backend":{"Type":"host-gw"}}`, "", false},
		{"alloc", `{"Network":"198.18.0.0/16","Backend":{"Type":"alloc"}}`, "lease-backend-type", false},
		{"extension", `{"Network":"198.18.0.0/16","Backend":{"Type":"extension","SubnetAddCommand":"true"}}`, "The extension backend", false},
		{"wireguard", `{"Network":"198.18.0.0/16","Backend":{"Type":"wireguard","Mode":"ipv4"}}`, "The wireguard backend", false},
		{"wireguard ListenPort", `{"Network":"198.18.0.0/16","Backend":{"Type":"wireguard","ListenPort":70000}}`, "", false},
		{"wireguard MTU", `{"Network":"198.18.0.0/16","Backend":{"Type":"wireguard","MTU":600}}`, "", false},
		{"wireguard Device", `{"Network":"198.18.0.0/16","Backend":{"Type":"wireguard","Device":"gpu"}}`, "", false},
		{"ipip", `{"Network":"198.18.0.0/16","Backend":{"Type":"IPIP"}}`, "`ipip` and `ipsec` stay refused", false},
		{"unknown", `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan-gbp"}}`, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := lease.ParseConfig([]byte(c.conf))
			if err != nil {
				t.Fatal(err)
			}
			tuning := Tuning{}
			tuning.WireGuard.KeyFile = filepath.Join(t.TempDir(), "wgkey")
			notes, cerr := Check(cfg, ext, tuning)
			be, nerr := New(cfg, ext, tuning, zap.NewNop())
			if nerr == nil {
				be.Close()
			}
			if (cerr == nil) != (nerr == nil) || cerr != nil && cerr.Error() != nerr.Error() {
				t.Fatalf("Check: %v; New: %v", cerr, nerr)
			}
			if errors.Is(cerr, encap.ErrUnknownOption) != c.unknown {
				t.Errorf("error %v: unknown option %t, want %t", cerr, !c.unknown, c.unknown)
			}
			if cerr == nil && len(notes) == 0 {
				t.Error("no notes for an accepted config")
			}
			found := c.diff == ""
			for _, n := range notes {
				if n.Text == "" {
					t.Errorf("empty note %+v", n)
				}
				found = found || n.Diff == c.diff
			}
			if !found {
				t.Errorf("notes %+v lack the difference %q", notes, c.diff)
			}
		})
	}
}
