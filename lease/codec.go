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

// wireAttrs is a lease value in flanneld's field order, with the "PublicIPv6": null
// that flanneld (without IPv6) writes too; readers of either ignore what they lack.
type wireAttrs struct {
	PublicIP    netip.Addr      `json:"PublicIP"`
	PublicIPv6  *netip.Addr     `json:"PublicIPv6"`
	BackendType string          `json:"BackendType,omitempty"`
	BackendData json.RawMessage `json:"BackendData,omitempty"`
	HostID      string          `json:"WeftHostID,omitempty"`
}

// EncodeAttrs is the JSON value of a lease.
func EncodeAttrs(a Attrs) ([]byte, error) {
	if !a.PublicIP.Is4() {
		return nil, fmt.Errorf("%w: PublicIP %v is not IPv4", ErrBadValue, a.PublicIP)
	}
	return json.Marshal(wireAttrs{PublicIP: a.PublicIP, BackendType: a.BackendType, BackendData: a.BackendData, HostID: a.HostID})
}

// DecodeAttrs parses a lease value as flanneld or weftd write it.
func DecodeAttrs(data []byte) (Attrs, error) {
	var a Attrs
	if err := json.Unmarshal(data, &a); err != nil {
		return Attrs{}, fmt.Errorf("%w: %w", ErrBadValue, err)
	}
	if !a.PublicIP.Is4() {
		return Attrs{}, fmt.Errorf("%w: PublicIP missing or not IPv4", ErrBadValue)
	}
	if string(a.BackendData) == "null" {
		a.BackendData = nil
	}
	return a, nil
}
