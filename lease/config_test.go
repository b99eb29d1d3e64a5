package lease

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseConfigDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, json      string
		subnetLen       int
		min, max, btype string
		backend         string
	}{
		{"slash8", `{"Network":"10.0.0.0/8"}`, 24, "10.0.1.0", "10.255.255.0", "udp", `{}`},
		{"slash22 keeps 24", `{"Network":"198.18.0.0/22"}`, 24, "198.18.1.0", "198.18.3.0", "udp", `{}`},
		{"slash23 gives prefix+2", `{"Network":"198.18.0.0/23"}`, 25, "198.18.0.128", "198.18.1.128", "udp", `{}`},
		{"slash26 gives 28", `{"Network":"198.18.0.0/26"}`, 28, "198.18.0.16", "198.18.0.48", "udp", `{}`},
		{"slash28 gives 30", `{"Network":"198.18.0.0/28"}`, 30, "198.18.0.4", "198.18.0.12", "udp", `{}`},
		{"SubnetLen 29", `{"Network":"198.18.0.0/16","SubnetLen":29}`, 29, "198.18.0.8", "198.18.255.248", "udp", `{}`},
		{"SubnetLen 30", `{"Network":"198.18.0.0/16","SubnetLen":30}`, 30, "198.18.0.4", "198.18.255.252", "udp", `{}`},
		{"four subnets", `{"Network":"198.18.0.0/16","SubnetLen":18}`, 18, "198.18.64.0", "198.18.192.0", "udp", `{}`},
		{"whole space", `{"Network":"0.0.0.0/0"}`, 24, "0.0.1.0", "255.255.255.0", "udp", `{}`},
		{"2^30 subnets, as flanneld takes", `{"Network":"0.0.0.0/0","SubnetLen":30}`, 30, "0.0.0.4", "255.255.255.252", "udp", `{}`},
		{"explicit fields", `{"Network":"198.18.0.0/16","SubnetLen":20,"SubnetMin":"198.18.16.0","SubnetMax":"198.18.32.0","Backend":{"Type":"vxlan","VNI":4}}`,
			20, "198.18.16.0", "198.18.32.0", "vxlan", `{"Type":"vxlan","VNI":4}`},
		{"min equals max", `{"Network":"198.18.0.0/16","SubnetMin":"198.18.7.0","SubnetMax":"198.18.7.0"}`, 24, "198.18.7.0", "198.18.7.0", "udp", `{}`},
		{"backend without type is udp", `{"Network":"198.18.0.0/16","Backend":{"Port":8000}}`, 24, "198.18.1.0", "198.18.255.0", "udp", `{"Port":8000}`},
		{"null backend", `{"Network":"198.18.0.0/16","Backend":null}`, 24, "198.18.1.0", "198.18.255.0", "udp", `{}`},
		{"null type", `{"Network":"198.18.0.0/16","Backend":{"Type":null}}`, 24, "198.18.1.0", "198.18.255.0", "udp", `{"Type":null}`},
		{"EnableIPv4 true", `{"Network":"198.18.0.0/16","EnableIPv4":true}`, 24, "198.18.1.0", "198.18.255.0", "udp", `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.json))
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			if c.SubnetLen != tc.subnetLen || c.SubnetMin != addr(tc.min) || c.SubnetMax != addr(tc.max) ||
				c.BackendType != tc.btype || string(c.Backend) != tc.backend {
				t.Errorf("got len %d min %v max %v type %q backend %s; want %d %s %s %q %s",
					c.SubnetLen, c.SubnetMin, c.SubnetMax, c.BackendType, c.Backend,
					tc.subnetLen, tc.min, tc.max, tc.btype, tc.backend)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, json, field string }{
		{"not JSON", `network`, "JSON"},
		{"array", `[]`, "JSON"},
		{"empty object", `{}`, "Network"},
		{"null", `null`, "Network"},
		{"network without length", `{"Network":"10.0.0.0"}`, "Network"},
		{"network IPv6", `{"Network":"fd00::/8"}`, "Network"},
		{"network 4in6", `{"Network":"::ffff:10.0.0.0/104"}`, "Network"},
		{"network host bits", `{"Network":"10.0.0.1/8"}`, "Network"},
		{"network number", `{"Network":5}`, "Network"},
		{"default subnet too long", `{"Network":"198.18.0.0/29"}`, "SubnetLen"},
		{"SubnetLen 31", `{"Network":"198.18.0.0/16","SubnetLen":31}`, "SubnetLen"},
		{"SubnetLen 32", `{"Network":"198.18.0.0/16","SubnetLen":32}`, "SubnetLen"},
		{"only two subnets", `{"Network":"198.18.0.0/16","SubnetLen":17}`, "SubnetLen"},
		{"SubnetLen equal to network", `{"Network":"198.18.0.0/16","SubnetLen":16}`, "SubnetLen"},
		{"SubnetLen shorter than network", `{"Network":"198.18.0.0/16","SubnetLen":8}`, "SubnetLen"},
		{"SubnetLen negative", `{"Network":"198.18.0.0/16","SubnetLen":-1}`, "SubnetLen"},
		{"SubnetLen string", `{"Network":"198.18.0.0/16","SubnetLen":"24"}`, "SubnetLen"},
		{"SubnetMin outside", `{"Network":"198.18.0.0/16","SubnetMin":"198.19.0.0"}`, "SubnetMin"},
		{"SubnetMin misaligned", `{"Network":"198.18.0.0/16","SubnetMin":"198.18.0.5"}`, "SubnetMin"},
		{"SubnetMin not an address", `{"Network":"198.18.0.0/16","SubnetMin":"x"}`, "SubnetMin"},
		{"SubnetMin IPv6", `{"Network":"198.18.0.0/16","SubnetMin":"::1"}`, "SubnetMin"},
		{"SubnetMin prefix", `{"Network":"198.18.0.0/16","SubnetMin":"198.18.1.0/24"}`, "SubnetMin"},
		{"SubnetMax outside", `{"Network":"198.18.0.0/16","SubnetMax":"10.0.0.0"}`, "SubnetMax"},
		{"SubnetMax misaligned", `{"Network":"198.18.0.0/16","SubnetLen":20,"SubnetMax":"198.18.17.0"}`, "SubnetMax"},
		{"SubnetMax below SubnetMin", `{"Network":"198.18.0.0/16","SubnetMin":"198.18.9.0","SubnetMax":"198.18.8.0"}`, "SubnetMax"},
		{"backend string", `{"Network":"198.18.0.0/16","Backend":"udp"}`, "Backend"},
		{"backend array", `{"Network":"198.18.0.0/16","Backend":[{"Type":"udp"}]}`, "Backend"},
		{"backend type number", `{"Network":"198.18.0.0/16","Backend":{"Type":5}}`, "Backend"},
		{"backend type empty", `{"Network":"198.18.0.0/16","Backend":{"Type":""}}`, "Backend.Type"},
		{"IPv6 enabled", `{"Network":"198.18.0.0/16","EnableIPv6":true}`, "EnableIPv6"},
		{"IPv4 disabled", `{"Network":"198.18.0.0/16","EnableIPv4":false}`, "EnableIPv4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.json))
			if err == nil {
				t.Fatalf("accepted %s as %+v", tc.json, c)
			}
			if !errors.Is(err, ErrBadConfig) {
				t.Errorf("error %q does not wrap ErrBadConfig", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
}

func TestConfigArithmetic(t *testing.T) {
	c, err := ParseConfig([]byte(`{"Network":"198.18.0.0/16","SubnetLen":20,"SubnetMin":"198.18.16.0","SubnetMax":"198.18.224.0"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Count() != 16 {
		t.Errorf("Count = %d, want 16", c.Count())
	}
	for _, tc := range []struct {
		addr   string
		index  int
		subnet string
	}{
		{"198.18.0.0", 0, "198.18.0.0/20"},
		{"198.18.16.0", 1, "198.18.16.0/20"},
		{"198.18.31.255", 1, "198.18.16.0/20"},
		{"198.18.255.255", 15, "198.18.240.0/20"},
	} {
		i := c.Index(addr(tc.addr))
		if i != tc.index || c.Subnet(i) != pfx(tc.subnet) {
			t.Errorf("Index(%s) = %d, Subnet = %v; want %d, %s", tc.addr, i, c.Subnet(i), tc.index, tc.subnet)
		}
	}
	for _, tc := range []struct {
		p    netip.Prefix
		want bool
	}{
		{pfx("198.18.16.0/20"), true},
		{pfx("198.18.224.0/20"), true},
		{pfx("198.18.128.0/20"), true},
		{pfx("198.18.0.0/20"), false},   // below SubnetMin
		{pfx("198.18.240.0/20"), false}, // above SubnetMax
		{pfx("198.18.16.0/24"), false},  // wrong length
		{pfx("198.18.17.0/20"), false},  // not masked
		{pfx("198.19.16.0/20"), false},  // other network
		{pfx("::/20"), false},
		{netip.Prefix{}, false},
	} {
		if got := c.InRange(tc.p); got != tc.want {
			t.Errorf("InRange(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
}

// TestParseConfigEnableNFTables: flannel's EnableNFTables key, matched without regard
// to case as flanneld's JSON decoding does; absent means iptables.
func TestParseConfigEnableNFTables(t *testing.T) {
	for _, tc := range []struct {
		json string
		want bool
	}{
		{`{"Network":"198.18.0.0/16"}`, false},
		{`{"Network":"198.18.0.0/16","EnableNFTables":true}`, true},
		{`{"Network":"198.18.0.0/16","enablenftables":true}`, true},
		{`{"Network":"198.18.0.0/16","EnableNFTables":false}`, false},
	} {
		c, err := ParseConfig([]byte(tc.json))
		if err != nil {
			t.Fatalf("%s: %v", tc.json, err)
		}
		if c.EnableNFTables != tc.want {
			t.Errorf("%s: EnableNFTables %v, want %v", tc.json, c.EnableNFTables, tc.want)
		}
	}
	if _, err := ParseConfig([]byte(`{"Network":"198.18.0.0/16","EnableNFTables":"yes"}`)); !errors.Is(err, ErrBadConfig) {
		t.Errorf(`EnableNFTables "yes": error %v, want ErrBadConfig`, err)
	}
}
