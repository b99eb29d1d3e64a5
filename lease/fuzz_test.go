package lease

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"Network":"10.0.0.0/8"}`,
		`{"Network":"198.18.0.0/26"}`,
		`{"Network":"0.0.0.0/0","SubnetLen":24}`,
		`{"Network":"198.18.0.0/16","SubnetLen":20,"SubnetMin":"198.18.16.0","SubnetMax":"198.18.32.0","Backend":{"Type":"vxlan"}}`,
		`{"Network":"198.18.0.0/16","SubnetLen":17}`,
		`{"Network":"198.18.0.0/16","SubnetMin":"198.18.0.0","SubnetMax":"198.18.255.0"}`,
		`{"Network":"198.18.0.1/16"}`, `{}`, `null`, `[]`, `{"Network":"198.18.0.0/16","Backend":"x"}`,
		`{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/48"}`,
		`{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00::/124","IPv6SubnetLen":126}`,
		`{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00::/56","IPv6SubnetMin":"fd00:0:0:10::","IPv6SubnetMax":"fd00:0:0:20::"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			if c != nil || !errors.Is(err, ErrBadConfig) {
				t.Fatalf("error %v with config %+v, or not ErrBadConfig", err, c)
			}
			return
		}
		if c.BackendType == "" || !json.Valid(c.Backend) {
			t.Fatalf("Backend %q %s", c.BackendType, c.Backend)
		}
		if c.EnableIPv6 {
			checkV6Config(t, c)
		}
		if !c.EnableIPv4 {
			if !c.EnableIPv6 || c.Network.IsValid() {
				t.Fatalf("IPv4 off: EnableIPv6 %v, Network %v", c.EnableIPv6, c.Network)
			}
			return
		}
		n := c.Network
		switch {
		case !n.Addr().Is4() || n.Masked() != n:
			t.Fatalf("Network %v", n)
		case c.SubnetLen < n.Bits()+2 || c.SubnetLen > 30:
			t.Fatalf("SubnetLen %d for %v", c.SubnetLen, n)
		case c.Count() != 1<<(c.SubnetLen-n.Bits()):
			t.Fatalf("Count %d", c.Count())
		case c.SubnetMax.Less(c.SubnetMin):
			t.Fatalf("SubnetMax %v < SubnetMin %v", c.SubnetMax, c.SubnetMin)
		}
		for _, a := range []struct {
			name string
			i    int
		}{{"SubnetMin", c.Index(c.SubnetMin)}, {"SubnetMax", c.Index(c.SubnetMax)}} {
			s := c.Subnet(a.i)
			if a.i < 0 || a.i >= c.Count() || !c.InRange(s) || c.Index(s.Addr()) != a.i {
				t.Fatalf("%s: index %d subnet %v out of range in %+v", a.name, a.i, s, c)
			}
		}
		if c.Subnet(c.Index(c.SubnetMin)).Addr() != c.SubnetMin || c.Subnet(c.Index(c.SubnetMax)).Addr() != c.SubnetMax {
			t.Fatalf("SubnetMin/Max not on a /%d boundary: %+v", c.SubnetLen, c)
		}
	})
}

// checkV6Config checks what ParseConfig promises of an accepted IPv6 network: an
// IPv6 prefix without host bits, a subnet length from its length + 2 to /126, and
// IPv6SubnetMin <= IPv6SubnetMax, both leasable subnets.
func checkV6Config(t *testing.T, c *Config) {
	t.Helper()
	n := c.IPv6Network
	switch {
	case !n.Addr().Is6() || n.Addr().Is4In6() || n.Masked() != n:
		t.Fatalf("IPv6Network %v", n)
	case c.IPv6SubnetLen < n.Bits()+2 || c.IPv6SubnetLen > 126:
		t.Fatalf("IPv6SubnetLen %d for %v", c.IPv6SubnetLen, n)
	case c.IPv6SubnetMax.Less(c.IPv6SubnetMin):
		t.Fatalf("IPv6SubnetMax %v < IPv6SubnetMin %v", c.IPv6SubnetMax, c.IPv6SubnetMin)
	}
	for _, a := range []netip.Addr{c.IPv6SubnetMin, c.IPv6SubnetMax} {
		if s := netip.PrefixFrom(a, c.IPv6SubnetLen); !c.InRangeV6(s) {
			t.Fatalf("%v not leasable in %+v", s, c)
		}
	}
}

func FuzzParseSubnetKey(f *testing.F) {
	for _, s := range []string{"198.18.5.0-24", "/coreos.com/network/subnets/10.0.0.0-8", "0.0.0.0-0",
		"1.2.3.4-32", "1.2.3.4-31", "1.2.3.0-024", "::-0", "a-b", "-", "/", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		p, err := ParseSubnetKey(key)
		if err != nil {
			if !errors.Is(err, ErrBadKey) {
				t.Fatalf("error %v is not ErrBadKey", err)
			}
			return
		}
		name := key[strings.LastIndexByte(key, '/')+1:]
		if !p.Addr().Is4() || p.Masked() != p {
			t.Fatalf("ParseSubnetKey(%q) = %v", key, p)
		}
		if k := SubnetKey(p); k != name {
			t.Fatalf("SubnetKey(ParseSubnetKey(%q)) = %q", key, k)
		}
		if q, err := ParseSubnetKey(SubnetKey(p)); err != nil || q != p {
			t.Fatalf("ParseSubnetKey(SubnetKey(%v)) = %v, %v", p, q, err)
		}
	})
}

func FuzzParseLeaseKey(f *testing.F) {
	for _, s := range []string{"198.18.5.0-24", "198.18.5.0-24&fd00:db8:0:5::-64", "0.0.0.0-0&fd00::-64",
		"/coreos.com/network/subnets/10.0.0.0-8&fd00::-8", "0.0.0.0-0", "1.2.3.0-24&", "1.2.3.0-24&FD00::-64",
		"1.2.3.0-24&fd00::-064", "1.2.3.0-24&::ffff:1.2.3.0-120", "1.2.3.0-24&fe80::%x-64", "&", "-&-", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		v4, v6, err := ParseLeaseKey(key)
		if err != nil {
			if !errors.Is(err, ErrBadKey) {
				t.Fatalf("error %v is not ErrBadKey", err)
			}
			return
		}
		if !v4.IsValid() && !v6.IsValid() {
			t.Fatalf("ParseLeaseKey(%q) holds no subnet", key)
		}
		if v4.IsValid() && (!v4.Addr().Is4() || v4.Masked() != v4 || v4.Bits() == 0 && v4.Addr().IsUnspecified()) {
			t.Fatalf("ParseLeaseKey(%q) IPv4 part %v", key, v4)
		}
		if v6.IsValid() && (!isIPv6(v6.Addr()) || v6.Masked() != v6) {
			t.Fatalf("ParseLeaseKey(%q) IPv6 part %v", key, v6)
		}
		k := LeaseKey(v4, v6)
		if w4, w6, err := ParseLeaseKey(k); err != nil || w4 != v4 || w6 != v6 {
			t.Fatalf("ParseLeaseKey(LeaseKey(%v, %v) = %q) = %v, %v, %v", v4, v6, k, w4, w6, err)
		}
		if !v6.IsValid() && k != key[strings.LastIndexByte(key, '/')+1:] {
			t.Fatalf("LeaseKey of the IPv4 key %q is %q", key, k)
		}
	})
}

func FuzzDecodeAttrs(f *testing.F) {
	for _, s := range []string{
		`{"PublicIP":"192.0.2.1"}`,
		`{"PublicIP":"192.0.2.1","BackendType":"vxlan","BackendData":{"VtepMAC":"aa:bb:cc:dd:ee:ff"}}`,
		`{"PublicIP":"192.0.2.1","BackendType":"udp","BackendData": { "x" : [1, 2] },"WeftHostID":"h"}`,
		`{"PublicIP":"192.0.2.1","BackendData":null}`,
		`{"PublicIP":"192.0.2.1","BackendData":"<&>"}`,
		`{"PublicIP":""}`, `null`, `[]`, `{`,
		flanneldDualStackVXLAN,
		`{"PublicIP":"0.0.0.0","PublicIPv6":"fd00::1","BackendV6Data":null}`,
		`{"PublicIP":"192.0.2.1","PublicIPv6":"::ffff:192.0.2.1"}`,
		`{"PublicIP":"192.0.2.1","WeftSite":"a","WeftSiteIP":"10.0.0.1","WeftNAT":true,"WeftOutside":"203.0.113.2:1"}`,
		`{"PublicIP":"192.0.2.1","WeftSiteIP":"x","WeftOutside":"[::1]:70000"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := DecodeAttrs(data)
		var ign *IgnoredFieldsError
		if errors.As(err, &ign) {
			if len(ign.Fields) == 0 || a.SiteIP.IsValid() && a.Outside.IsValid() {
				t.Fatalf("%v, yet %+v", err, a)
			}
			err = nil // the lease stands without them
		}
		if err != nil {
			if !errors.Is(err, ErrBadValue) {
				t.Fatalf("error %v is not ErrBadValue", err)
			}
			return
		}
		enc, err := EncodeAttrs(a)
		if err != nil {
			t.Fatalf("EncodeAttrs(DecodeAttrs(%q)): %v", data, err)
		}
		b, err := DecodeAttrs(enc)
		if err != nil {
			t.Fatalf("DecodeAttrs(%s): %v", enc, err)
		}
		if b.PublicIP != a.PublicIP || b.PublicIPv6 != a.PublicIPv6 || b.BackendType != a.BackendType ||
			b.HostID != a.HostID || b.Site != a.Site || b.SiteIP != a.SiteIP || b.NAT != a.NAT || b.Outside != a.Outside || !jsonEqual(b.BackendData, a.BackendData) || !jsonEqual(b.BackendV6Data, a.BackendV6Data) {
			t.Fatalf("round trip of %q: %+v became %+v via %s", data, a, b, enc)
		}
		if enc2, err := EncodeAttrs(b); err != nil || !bytes.Equal(enc2, enc) {
			t.Fatalf("second encoding %s, %v differs from %s", enc2, err, enc)
		}
	})
}

// jsonEqual compares two JSON texts by meaning (nil and empty are equal).
func jsonEqual(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	va, ea := decodeAny(a)
	vb, eb := decodeAny(b)
	return ea == nil && eb == nil && reflect.DeepEqual(va, vb)
}

func decodeAny(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}
