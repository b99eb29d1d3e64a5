package lease

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

var (
	// ErrBadKey is wrapped by errors about subnet keys that are not <a.b.c.d>-<len>.
	ErrBadKey = errors.New("bad subnet key")
	// ErrBadValue is wrapped by errors about lease values that are not valid JSON attrs.
	ErrBadValue = errors.New("bad lease value")
)

// IgnoredFieldsError is what DecodeAttrs returns beside a lease it could read when
// some of weft's own optional fields (WeftSiteIP, WeftOutside) could not be: they
// are left out, the rest of the lease stands, as flanneld, which reads none of
// them, takes it. Readers log it and keep the lease.
type IgnoredFieldsError struct {
	Fields []string // "WeftOutside: <why>", one per field left out
}

func (e *IgnoredFieldsError) Error() string {
	return "lease value: left out " + strings.Join(e.Fields, "; ")
}

// SubnetKey is the name of p under <prefix>/subnets/: "198.18.5.0-24".
func SubnetKey(p netip.Prefix) string {
	return p.Addr().String() + "-" + strconv.Itoa(p.Bits())
}

// ParseSubnetKey parses the last element of a subnet key ("198.18.5.0-24"); a full
// path is accepted too.
func ParseSubnetKey(key string) (netip.Prefix, error) {
	name := key[strings.LastIndexByte(key, '/')+1:]
	addr, bits, ok := strings.Cut(name, "-")
	if !ok {
		return netip.Prefix{}, fmt.Errorf("%w: %q has no '-'", ErrBadKey, key)
	}
	a, err := netip.ParseAddr(addr)
	if err != nil || !a.Is4() {
		return netip.Prefix{}, fmt.Errorf("%w: %q: not an IPv4 address", ErrBadKey, key)
	}
	n, err := strconv.Atoi(bits)
	if err != nil || n < 0 || n > 32 || strconv.Itoa(n) != bits {
		return netip.Prefix{}, fmt.Errorf("%w: %q: bad prefix length", ErrBadKey, key)
	}
	p := netip.PrefixFrom(a, n)
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%w: %q: host bits set", ErrBadKey, key)
	}
	return p, nil
}

// isIPv6 reports whether a is a plain IPv6 address: not an IPv4-mapped one, no zone.
func isIPv6(a netip.Addr) bool { return a.Is6() && !a.Is4In6() && a.Zone() == "" }

// LeaseKey is the name under <prefix>/subnets/ of a lease on v4 and v6, in flanneld's
// layout: "198.18.5.0-24" (IPv4 only), "198.18.5.0-24&fd00:0:0:5::-64" (dual stack), or
// "0.0.0.0-0&fd00:0:0:5::-64" (IPv6 only). A zero prefix is an absent one.
func LeaseKey(v4, v6 netip.Prefix) string {
	k := "0.0.0.0-0"
	if v4.IsValid() {
		k = SubnetKey(v4)
	}
	if v6.IsValid() {
		k += "&" + v6.Addr().String() + "-" + strconv.Itoa(v6.Bits())
	}
	return k
}

// ParseLeaseKey parses the last element of a lease key in any of LeaseKey's three
// forms (a full path is accepted too). An absent subnet is returned as the zero prefix;
// the IPv4 part 0.0.0.0-0 means absent, and a key must hold at least one subnet.
func ParseLeaseKey(key string) (v4, v6 netip.Prefix, err error) {
	name := key[strings.LastIndexByte(key, '/')+1:]
	s4, s6, dual := strings.Cut(name, "&")
	if v4, err = ParseSubnetKey(s4); err != nil {
		return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("%w (in %q)", err, key)
	}
	if v4 == netip.PrefixFrom(netip.IPv4Unspecified(), 0) {
		v4 = netip.Prefix{}
	}
	if !dual {
		if !v4.IsValid() {
			return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("%w: %q holds no subnet", ErrBadKey, key)
		}
		return v4, netip.Prefix{}, nil
	}
	addr, bits, ok := strings.Cut(s6, "-")
	if !ok {
		return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("%w: %q: IPv6 part has no '-'", ErrBadKey, key)
	}
	a, err := netip.ParseAddr(addr)
	if err != nil || !isIPv6(a) {
		return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("%w: %q: not an IPv6 address", ErrBadKey, key)
	}
	n, err := strconv.Atoi(bits)
	if err != nil || n < 0 || n > 128 || strconv.Itoa(n) != bits {
		return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("%w: %q: bad IPv6 prefix length", ErrBadKey, key)
	}
	v6 = netip.PrefixFrom(a, n)
	if v6.Masked() != v6 {
		return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("%w: %q: IPv6 host bits set", ErrBadKey, key)
	}
	return v4, v6, nil
}

// wireAttrs is a lease value in flanneld's field order. PublicIPv6 is null when the
// host has no IPv6 address, as flanneld writes it; readers of either ignore what they lack.
type wireAttrs struct {
	PublicIP      netip.Addr      `json:"PublicIP"`
	PublicIPv6    *netip.Addr     `json:"PublicIPv6"`
	BackendType   string          `json:"BackendType,omitempty"`
	BackendData   json.RawMessage `json:"BackendData,omitempty"`
	BackendV6Data json.RawMessage `json:"BackendV6Data,omitempty"`
	HostID        string          `json:"WeftHostID,omitempty"`
	Site          string          `json:"WeftSite,omitempty"`
	SiteIP        netip.Addr      `json:"WeftSiteIP,omitzero"`
	NAT           bool            `json:"WeftNAT,omitempty"`
	Outside       netip.AddrPort  `json:"WeftOutside,omitzero"`
}

// EncodeAttrs is the JSON value of a lease.
func EncodeAttrs(a Attrs) ([]byte, error) {
	if !a.PublicIP.Is4() {
		return nil, fmt.Errorf("%w: PublicIP %v is not IPv4", ErrBadValue, a.PublicIP)
	}
	w := wireAttrs{PublicIP: a.PublicIP, BackendType: a.BackendType, BackendData: a.BackendData,
		BackendV6Data: a.BackendV6Data, HostID: a.HostID, Site: a.Site, SiteIP: a.SiteIP, NAT: a.NAT, Outside: a.Outside}
	if a.PublicIPv6.IsValid() {
		if !isIPv6(a.PublicIPv6) {
			return nil, fmt.Errorf("%w: PublicIPv6 %v is not IPv6", ErrBadValue, a.PublicIPv6)
		}
		w.PublicIPv6 = &a.PublicIPv6
	}
	return json.Marshal(w)
}

// decodedAttrs reads weft's optional address fields raw, to leave out a bad one
// alone (the outer fields shadow Attrs' of the same JSON name).
type decodedAttrs struct {
	Attrs
	SiteIP  json.RawMessage `json:"WeftSiteIP"`
	Outside json.RawMessage `json:"WeftOutside"`
}

// DecodeAttrs parses a lease value as flanneld or weftd write it. A value flanneld
// would take whose WeftSiteIP or WeftOutside is malformed is returned without them,
// with an *IgnoredFieldsError; any other error means no lease.
func DecodeAttrs(data []byte) (Attrs, error) {
	var d decodedAttrs
	if err := json.Unmarshal(data, &d); err != nil {
		return Attrs{}, fmt.Errorf("%w: %w", ErrBadValue, err)
	}
	a := d.Attrs
	var ignored []string
	if err := optionalField(d.SiteIP, &a.SiteIP); err != nil {
		ignored = append(ignored, "WeftSiteIP: "+err.Error())
	}
	if err := optionalField(d.Outside, &a.Outside); err != nil {
		ignored = append(ignored, "WeftOutside: "+err.Error())
	}
	if !a.PublicIP.Is4() {
		return Attrs{}, fmt.Errorf("%w: PublicIP missing or not IPv4", ErrBadValue)
	}
	if a.PublicIPv6.IsValid() && !isIPv6(a.PublicIPv6) {
		return Attrs{}, fmt.Errorf("%w: PublicIPv6 %v is not IPv6", ErrBadValue, a.PublicIPv6)
	}
	if string(a.BackendData) == "null" {
		a.BackendData = nil
	}
	if string(a.BackendV6Data) == "null" {
		a.BackendV6Data = nil
	}
	if ignored != nil {
		return a, &IgnoredFieldsError{Fields: ignored}
	}
	return a, nil
}

// optionalField decodes raw (absent or null: the zero value) into v; on error v
// stays zero.
func optionalField[T any](raw json.RawMessage, v *T) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var x T
	if err := json.Unmarshal(raw, &x); err != nil {
		return err
	}
	*v = x
	return nil
}
