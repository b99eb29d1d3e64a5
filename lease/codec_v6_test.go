package lease

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

func TestLeaseKey(t *testing.T) {
	none := netip.Prefix{}
	for _, tc := range []struct {
		key    string
		v4, v6 netip.Prefix // both zero: the key must be rejected
		canon  string       // LeaseKey of the result when it is not key
	}{
		{key: "198.18.5.0-24", v4: pfx("198.18.5.0/24")},
		{key: "/coreos.com/network/subnets/198.18.5.0-24", v4: pfx("198.18.5.0/24"), canon: "198.18.5.0-24"},
		{key: "198.18.5.0-24&fd00:db8:0:5::-64", v4: pfx("198.18.5.0/24"), v6: pfx("fd00:db8:0:5::/64")},
		{key: "/coreos.com/network/subnets/10.244.3.0-24&fd00:0:0:103::-64", v4: pfx("10.244.3.0/24"), v6: pfx("fd00:0:0:103::/64"),
			canon: "10.244.3.0-24&fd00:0:0:103::-64"},
		{key: "0.0.0.0-0&fd00:db8:0:5::-64", v6: pfx("fd00:db8:0:5::/64")}, // IPv6 only, as flanneld names it
		{key: "198.18.0.4-30&fd00::10-126", v4: pfx("198.18.0.4/30"), v6: pfx("fd00::10/126")},
		{key: "198.18.5.0-24&FD00:DB8:0:5::-64", v4: pfx("198.18.5.0/24"), v6: pfx("fd00:db8:0:5::/64"),
			canon: "198.18.5.0-24&fd00:db8:0:5::-64"},
		{key: "0.0.0.0-0"},                           // no subnet at all
		{key: "0.0.0.0-0&"},                          // empty IPv6 part
		{key: "198.18.5.0-24&"},                      // empty IPv6 part
		{key: "198.18.5.0-24&fd00::"},                // no length
		{key: "198.18.5.0-24&fd00::-129"},            // too long
		{key: "198.18.5.0-24&fd00::-064"},            // leading zero
		{key: "198.18.5.0-24&fd00::1-64"},            // host bits
		{key: "198.18.5.0-24&198.18.6.0-24"},         // IPv4 after '&'
		{key: "198.18.5.0-24&::ffff:198.18.6.0-120"}, // 4in6
		{key: "198.18.5.0-24&fe80::%eth0-64"},        // zone
		{key: "198.18.5.0-24&fd00::-64&fd01::-64"},   // two IPv6 parts
		{key: "fd00::-64&198.18.5.0-24"},             // wrong order
		{key: "198.18.5.1-24&fd00::-64"},             // IPv4 host bits
		{key: "&fd00::-64"},
	} {
		v4, v6, err := ParseLeaseKey(tc.key)
		if !tc.v4.IsValid() && !tc.v6.IsValid() {
			if !errors.Is(err, ErrBadKey) {
				t.Errorf("ParseLeaseKey(%q) = %v, %v, %v; want an ErrBadKey", tc.key, v4, v6, err)
			}
			continue
		}
		if err != nil || v4 != tc.v4 || v6 != tc.v6 {
			t.Errorf("ParseLeaseKey(%q) = %v, %v, %v; want %v, %v", tc.key, v4, v6, err, tc.v4, tc.v6)
			continue
		}
		want := tc.canon
		if want == "" {
			want = tc.key
		}
		if k := LeaseKey(v4, v6); k != want {
			t.Errorf("LeaseKey(%v, %v) = %q, want %q", v4, v6, k, want)
		}
	}
	if k := LeaseKey(pfx("198.18.5.0/24"), none); k != SubnetKey(pfx("198.18.5.0/24")) {
		t.Errorf("LeaseKey(v4 only) = %q, want SubnetKey's", k)
	}
}

// flanneld's lease value on a dual-stack vxlan network (the MACs made up).
const flanneldDualStackVXLAN = `{"PublicIP":"192.0.2.1","PublicIPv6":"2001:db8::1","BackendType":"vxlan",` +
	`"BackendData":{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:ff"},"BackendV6Data":{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:fe"}}`

func TestAttrsIPv6(t *testing.T) {
	want := Attrs{PublicIP: addr("192.0.2.1"), PublicIPv6: addr("2001:db8::1"), BackendType: "vxlan",
		BackendData:   json.RawMessage(`{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:ff"}`),
		BackendV6Data: json.RawMessage(`{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:fe"}`)}
	got, err := DecodeAttrs([]byte(flanneldDualStackVXLAN))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeAttrs = %+v, %v; want %+v", got, err, want)
	}
	// Written back byte for byte as flanneld writes it.
	data, err := EncodeAttrs(got)
	if err != nil || string(data) != flanneldDualStackVXLAN {
		t.Errorf("EncodeAttrs = %s, %v; want %s", data, err, flanneldDualStackVXLAN)
	}
	if !got.Equal(want) {
		t.Error("Equal is false for equal attrs")
	}
	other := want
	other.PublicIPv6 = addr("2001:db8::2")
	if got.Equal(other) {
		t.Error("Equal ignores PublicIPv6")
	}
	other = want
	other.BackendV6Data = json.RawMessage(`{}`)
	if got.Equal(other) {
		t.Error("Equal ignores BackendV6Data")
	}

	for _, bad := range []string{
		`{"PublicIP":"192.0.2.1","PublicIPv6":"192.0.2.2"}`,
		`{"PublicIP":"192.0.2.1","PublicIPv6":"::ffff:192.0.2.2"}`,
		`{"PublicIP":"192.0.2.1","PublicIPv6":"fe80::1%eth0"}`,
		`{"PublicIP":"192.0.2.1","PublicIPv6":"nope"}`,
		`{"PublicIP":"192.0.2.1","PublicIPv6":7}`,
	} {
		if a, err := DecodeAttrs([]byte(bad)); !errors.Is(err, ErrBadValue) {
			t.Errorf("DecodeAttrs(%s) = %+v, %v; want ErrBadValue", bad, a, err)
		}
	}
	if _, err := EncodeAttrs(Attrs{PublicIP: addr("192.0.2.1"), PublicIPv6: addr("192.0.2.2")}); !errors.Is(err, ErrBadValue) {
		t.Errorf("EncodeAttrs(PublicIPv6 IPv4) = %v, want ErrBadValue", err)
	}
	// An empty string is no address, as null.
	if a, err := DecodeAttrs([]byte(`{"PublicIP":"192.0.2.1","PublicIPv6":""}`)); err != nil || a.PublicIPv6.IsValid() {
		t.Errorf(`DecodeAttrs(PublicIPv6 "") = %+v, %v`, a, err)
	}
}
