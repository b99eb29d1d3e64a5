package lease

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"sort"
	"testing"
)

func TestSubnetKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want netip.Prefix // zero: the key must be rejected
	}{
		{"198.18.5.0-24", pfx("198.18.5.0/24")},
		{"/coreos.com/network/subnets/198.18.5.0-24", pfx("198.18.5.0/24")},
		{"10.1.0.16-28", pfx("10.1.0.16/28")},
		{"0.0.0.0-0", pfx("0.0.0.0/0")},
		{"198.18.5.7-32", pfx("198.18.5.7/32")},
		{"", netip.Prefix{}},
		{"198.18.5.0", netip.Prefix{}},
		{"198.18.5.0/24", netip.Prefix{}},
		{"198.18.5.0-", netip.Prefix{}},
		{"-24", netip.Prefix{}},
		{"198.18.5.0-33", netip.Prefix{}},
		{"198.18.5.0--24", netip.Prefix{}},
		{"198.18.5.0-+24", netip.Prefix{}},
		{"198.18.5.0-024", netip.Prefix{}},
		{"198.18.5.0-24 ", netip.Prefix{}},
		{"198.18.5.1-24", netip.Prefix{}},  // host bits
		{"198.018.5.0-24", netip.Prefix{}}, // leading zero
		{"fd00::-64", netip.Prefix{}},      // IPv6
		{"::ffff:1.2.3.0-120", netip.Prefix{}},
		{"198.18.5.0-24/", netip.Prefix{}}, // trailing slash: empty last element
	} {
		got, err := ParseSubnetKey(tc.key)
		if !tc.want.IsValid() {
			if err == nil || !errors.Is(err, ErrBadKey) {
				t.Errorf("ParseSubnetKey(%q) = %v, %v; want an ErrBadKey", tc.key, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseSubnetKey(%q) = %v, %v; want %v", tc.key, got, err, tc.want)
			continue
		}
		if k := SubnetKey(got); k != SubnetKey(tc.want) || k[0] == '/' {
			t.Errorf("SubnetKey(%v) = %q", got, k)
		}
	}
	if k := SubnetKey(pfx("198.18.5.0/24")); k != "198.18.5.0-24" {
		t.Errorf("SubnetKey = %q, want flannel's 198.18.5.0-24", k)
	}
}

func jsonKeys(t *testing.T, data []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func TestEncodeAttrsFieldNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    Attrs
		keys []string
	}{
		{"flanneld udp", Attrs{PublicIP: addr("192.0.2.1")}, []string{"PublicIP", "PublicIPv6"}},
		{"vxlan", Attrs{PublicIP: addr("192.0.2.1"), BackendType: "vxlan", BackendData: json.RawMessage(`{"VtepMAC":"aa:bb:cc:dd:ee:ff"}`)},
			[]string{"BackendData", "BackendType", "PublicIP", "PublicIPv6"}},
		{"weft", Attrs{PublicIP: addr("192.0.2.1"), BackendType: "udp", HostID: "h1"},
			[]string{"BackendType", "PublicIP", "PublicIPv6", "WeftHostID"}},
		{"weft site behind NAT", Attrs{PublicIP: addr("192.0.2.10"), BackendType: "wireguard", HostID: "h1",
			Site: "a", SiteIP: addr("192.0.2.10"), NAT: true},
			[]string{"BackendType", "PublicIP", "PublicIPv6", "WeftHostID", "WeftNAT", "WeftSite", "WeftSiteIP"}},
		{"weft site dialable", Attrs{PublicIP: addr("203.0.113.5"), BackendType: "wireguard", Site: "a", SiteIP: addr("192.0.2.10")},
			[]string{"BackendType", "PublicIP", "PublicIPv6", "WeftSite", "WeftSiteIP"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := EncodeAttrs(tc.a)
			if err != nil {
				t.Fatal(err)
			}
			if got := jsonKeys(t, data); !reflect.DeepEqual(got, tc.keys) {
				t.Errorf("%s has fields %v, want %v", data, got, tc.keys)
			}
			back, err := DecodeAttrs(data)
			if err != nil || !back.Equal(tc.a) {
				t.Errorf("DecodeAttrs(%s) = %+v, %v; want %+v", data, back, err, tc.a)
			}
		})
	}
	// flanneld's own bytes for a vxlan lease, but for the MAC.
	got, err := EncodeAttrs(Attrs{PublicIP: addr("192.0.2.1"), BackendType: "vxlan",
		BackendData: json.RawMessage(`{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:ff"}`)})
	if want := `{"PublicIP":"192.0.2.1","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:ff"}}`; err != nil || string(got) != want {
		t.Errorf("EncodeAttrs = %s, %v; want %s", got, err, want)
	}
	if _, err := EncodeAttrs(Attrs{PublicIP: addr("fd00::1")}); !errors.Is(err, ErrBadValue) {
		t.Errorf("EncodeAttrs(IPv6) = %v, want ErrBadValue", err)
	}
	if _, err := EncodeAttrs(Attrs{}); !errors.Is(err, ErrBadValue) {
		t.Errorf("EncodeAttrs(zero) = %v, want ErrBadValue", err)
	}
}

func TestDecodeAttrs(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        *Attrs // nil: rejected with ErrBadValue
	}{
		{"flanneld udp", `{"PublicIP":"192.0.2.1"}`, &Attrs{PublicIP: addr("192.0.2.1")}},
		{"flanneld v0.2x vxlan", `{"PublicIP":"192.0.2.1","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:ff"},"BackendV6Data":null}`,
			&Attrs{PublicIP: addr("192.0.2.1"), BackendType: "vxlan", BackendData: json.RawMessage(`{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:ff"}`)}},
		{"null backend data", `{"PublicIP":"192.0.2.1","BackendType":"host-gw","BackendData":null}`,
			&Attrs{PublicIP: addr("192.0.2.1"), BackendType: "host-gw"}},
		{"weft host id", `{"PublicIP":"192.0.2.1","WeftHostID":"abc"}`, &Attrs{PublicIP: addr("192.0.2.1"), HostID: "abc"}},
		{"weft site", `{"PublicIP":"192.0.2.1","WeftSite":"a","WeftSiteIP":"10.0.0.1","WeftOutside":"203.0.113.2:40000"}`,
			&Attrs{PublicIP: addr("192.0.2.1"), Site: "a", SiteIP: addr("10.0.0.1"), Outside: netip.MustParseAddrPort("203.0.113.2:40000")}},
		{"bad WeftOutside left out", `{"PublicIP":"192.0.2.1","WeftSite":"a","WeftOutside":"203.0.113.2"}`,
			&Attrs{PublicIP: addr("192.0.2.1"), Site: "a"}},
		{"bad WeftSiteIP and WeftOutside left out", `{"PublicIP":"192.0.2.1","WeftSiteIP":7,"WeftOutside":{}}`,
			&Attrs{PublicIP: addr("192.0.2.1")}},
		{"null WeftOutside", `{"PublicIP":"192.0.2.1","WeftOutside":null}`, &Attrs{PublicIP: addr("192.0.2.1")}},
		{"empty", ``, nil},
		{"not JSON", `garbage`, nil},
		{"no PublicIP", `{"BackendType":"udp"}`, nil},
		{"empty PublicIP", `{"PublicIP":""}`, nil},
		{"null PublicIP", `{"PublicIP":null}`, nil},
		{"IPv6 PublicIP", `{"PublicIP":"fd00::1"}`, nil},
		{"4in6 PublicIP", `{"PublicIP":"::ffff:192.0.2.1"}`, nil},
		{"PublicIP number", `{"PublicIP":3221225985}`, nil},
		{"array", `[{"PublicIP":"192.0.2.1"}]`, nil},
		{"BackendType object", `{"PublicIP":"192.0.2.1","BackendType":{}}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeAttrs([]byte(tc.value))
			if tc.want == nil {
				if !errors.Is(err, ErrBadValue) {
					t.Errorf("DecodeAttrs(%s) = %+v, %v; want ErrBadValue", tc.value, got, err)
				}
				return
			}
			// fields left out with an *IgnoredFieldsError
			ignored := map[string]int{"bad WeftOutside left out": 1, "bad WeftSiteIP and WeftOutside left out": 2}[tc.name]
			var ign *IgnoredFieldsError
			if errors.As(err, &ign) && len(ign.Fields) == ignored {
				err = nil
			} else if err == nil && ignored > 0 {
				err = fmt.Errorf("no field left out, want %d", ignored)
			}
			if err != nil || !reflect.DeepEqual(got, *tc.want) {
				t.Errorf("DecodeAttrs(%s) = %+v, %v; want %+v", tc.value, got, err, *tc.want)
			}
		})
	}
}

func TestCompatibleWith(t *testing.T) {
	for _, tc := range []struct {
		mine, theirs string
		want         bool
	}{
		{"udp", "", true}, // flanneld's udp leases carry no BackendType
		{"udp", "udp", true},
		{"vxlan", "vxlan", true},
		{"vxlan", "", false},
		{"udp", "vxlan", false},
		{"host-gw", "udp", false},
	} {
		l := Lease{Attrs: Attrs{PublicIP: addr("192.0.2.1"), BackendType: tc.theirs}}
		if got := CompatibleWith(tc.mine, l); got != tc.want {
			t.Errorf("CompatibleWith(%q, %q) = %v, want %v", tc.mine, tc.theirs, got, tc.want)
		}
	}
}
