package lease

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	"github.com/weftnet/weft/internal/ipconv"
)

// ErrBadConfig is wrapped by every error about the network configuration.
var ErrBadConfig = errors.New("bad network config")

// rawConfig is the JSON at <prefix>/config, as flannel defines it.
type rawConfig struct {
	Network    string          `json:"Network"`
	SubnetLen  int             `json:"SubnetLen"`
	SubnetMin  string          `json:"SubnetMin"`
	SubnetMax  string          `json:"SubnetMax"`
	EnableIPv4 *bool           `json:"EnableIPv4"`
	EnableIPv6 bool            `json:"EnableIPv6"`
	Backend    json.RawMessage `json:"Backend"`

	IPv6Network   string `json:"IPv6Network"`
	IPv6SubnetLen int    `json:"IPv6SubnetLen"`
	IPv6SubnetMin string `json:"IPv6SubnetMin"`
	IPv6SubnetMax string `json:"IPv6SubnetMax"`

	EnableNFTables bool `json:"EnableNFTables"`
}

func badField(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrBadConfig, field, fmt.Sprintf(format, args...))
}

// ParseConfig parses and validates a network config, filling in flannel's defaults.
func ParseConfig(data []byte) (*Config, error) {
	var raw rawConfig
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object: %w", ErrBadConfig, err)
	}
	c := &Config{EnableIPv4: raw.EnableIPv4 == nil || *raw.EnableIPv4, EnableIPv6: raw.EnableIPv6,
		EnableNFTables: raw.EnableNFTables}
	if !c.EnableIPv4 && !c.EnableIPv6 {
		return nil, badField("EnableIPv4", "false, and EnableIPv6 is not true: the config enables no network")
	}
	if c.EnableIPv4 {
		if err := c.parseIPv4(&raw); err != nil {
			return nil, err
		}
	}
	if c.EnableIPv6 {
		if err := c.parseIPv6(&raw); err != nil {
			return nil, err
		}
	}
	if err := c.parseBackend(raw.Backend); err != nil {
		return nil, err
	}
	return c, nil
}

// parseIPv4 checks Network, SubnetLen, SubnetMin and SubnetMax and fills in their
// defaults (flanneld's rules and bounds, no others: a config flanneld takes, weftd
// takes too).
func (c *Config) parseIPv4(raw *rawConfig) error {
	if raw.Network == "" {
		return badField("Network", "missing")
	}
	network, err := netip.ParsePrefix(raw.Network)
	if err != nil || !network.Addr().Is4() {
		return badField("Network", "%q is not an IPv4 prefix", raw.Network)
	}
	if network.Masked() != network {
		return badField("Network", "%q has host bits set (did you mean %v?)", raw.Network, network.Masked())
	}
	c.Network, c.SubnetLen = network, raw.SubnetLen
	if c.SubnetLen == 0 {
		if network.Bits() <= 22 {
			c.SubnetLen = 24
		} else {
			c.SubnetLen = network.Bits() + 2
		}
	}
	// flanneld's bounds: a /30 still holds the bridge's and one pod's address, and the
	// Network must hold at least four subnets (the first is never leased).
	if c.SubnetLen > 30 {
		return badField("SubnetLen", "/%d is longer than /30", c.SubnetLen)
	}
	if c.SubnetLen < network.Bits()+2 {
		return badField("SubnetLen", "/%d must be at least 2 longer than the Network's /%d (at least four subnets)",
			c.SubnetLen, network.Bits())
	}
	if c.SubnetMin, err = c.boundary("SubnetMin", raw.SubnetMin, c.nth(1)); err != nil {
		return err
	}
	if c.SubnetMax, err = c.boundary("SubnetMax", raw.SubnetMax, c.nth(c.Count()-1)); err != nil {
		return err
	}
	if c.SubnetMax.Less(c.SubnetMin) {
		return badField("SubnetMax", "%v is below SubnetMin %v", c.SubnetMax, c.SubnetMin)
	}
	return nil
}

func (c *Config) parseBackend(raw json.RawMessage) error {
	c.BackendType, c.Backend = "udp", json.RawMessage(`{}`)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var b struct {
		Type *string `json:"Type"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return badField("Backend", "not a JSON object: %v", err)
	}
	if b.Type != nil {
		if *b.Type == "" {
			return badField("Backend.Type", "empty")
		}
		c.BackendType = *b.Type
	}
	c.Backend = raw
	return nil
}

// boundary parses SubnetMin or SubnetMax (def when empty) and checks it lies in the
// network on a SubnetLen boundary.
func (c *Config) boundary(field, s string, def netip.Addr) (netip.Addr, error) {
	if s == "" {
		return def, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return a, badField(field, "%q is not an IPv4 address", s)
	}
	if !c.Network.Contains(a) {
		return a, badField(field, "%v is outside Network %v", a, c.Network)
	}
	if netip.PrefixFrom(a, c.SubnetLen).Masked().Addr() != a {
		return a, badField(field, "%v is not on a /%d boundary", a, c.SubnetLen)
	}
	return a, nil
}

// Count is the number of subnets of SubnetLen in Network.
func (c *Config) Count() int { return 1 << (c.SubnetLen - c.Network.Bits()) }

// nth is the network address of the i-th subnet.
func (c *Config) nth(i int) netip.Addr {
	return ipconv.FromU32(ipconv.U32(c.Network.Addr()) + uint32(i)<<(32-c.SubnetLen))
}

// Index is the position of a in Network counted in subnets.
func (c *Config) Index(a netip.Addr) int {
	return int((ipconv.U32(a) - ipconv.U32(c.Network.Addr())) >> (32 - c.SubnetLen))
}

// Subnet is the i-th subnet of Network.
func (c *Config) Subnet(i int) netip.Prefix { return netip.PrefixFrom(c.nth(i), c.SubnetLen) }

// InRange reports whether p is a subnet of this network that may be leased: of length
// SubnetLen, aligned, and between SubnetMin and SubnetMax.
func (c *Config) InRange(p netip.Prefix) bool {
	a := p.Addr()
	return p.Bits() == c.SubnetLen && p.Masked() == p && c.Network.Contains(a) &&
		!a.Less(c.SubnetMin) && !c.SubnetMax.Less(a)
}
