package lease

import "net/netip"

// parseIPv6 checks IPv6Network, IPv6SubnetLen, IPv6SubnetMin and IPv6SubnetMax and fills
// in flanneld's defaults: a /64 per host when the network is /62 or wider, else the
// network's length + 2; at most /126; at least four subnets.
func (c *Config) parseIPv6(raw *rawConfig) error {
	if raw.IPv6Network == "" {
		return badField("IPv6Network", "missing (EnableIPv6 is true)")
	}
	network, err := netip.ParsePrefix(raw.IPv6Network)
	if err != nil || !network.Addr().Is6() || network.Addr().Is4In6() {
		return badField("IPv6Network", "%q is not an IPv6 prefix", raw.IPv6Network)
	}
	if network.Masked() != network {
		return badField("IPv6Network", "%q has host bits set (did you mean %v?)", raw.IPv6Network, network.Masked())
	}
	c.IPv6Network, c.IPv6SubnetLen = network, raw.IPv6SubnetLen
	switch {
	case c.IPv6SubnetLen < 0:
		return badField("IPv6SubnetLen", "/%d is negative", c.IPv6SubnetLen)
	case c.IPv6SubnetLen > 0:
		if c.IPv6SubnetLen > 126 {
			return badField("IPv6SubnetLen", "/%d is longer than /126", c.IPv6SubnetLen)
		}
		if c.IPv6SubnetLen < network.Bits()+2 {
			return badField("IPv6SubnetLen", "/%d must be at least 2 longer than the IPv6Network's /%d (at least four subnets)",
				c.IPv6SubnetLen, network.Bits())
		}
	case network.Bits() > 124:
		return badField("IPv6Network", "%v is too small: the smallest useful IPv6Network is a /124", network)
	case network.Bits() <= 62:
		c.IPv6SubnetLen = 64
	default:
		c.IPv6SubnetLen = network.Bits() + 2
	}
	// The first subnet is never leased, as in IPv4.
	defMin := lastAddr(netip.PrefixFrom(network.Addr(), c.IPv6SubnetLen)).Next()
	defMax := netip.PrefixFrom(lastAddr(network), c.IPv6SubnetLen).Masked().Addr()
	if c.IPv6SubnetMin, err = c.boundaryV6("IPv6SubnetMin", raw.IPv6SubnetMin, defMin); err != nil {
		return err
	}
	if c.IPv6SubnetMax, err = c.boundaryV6("IPv6SubnetMax", raw.IPv6SubnetMax, defMax); err != nil {
		return err
	}
	if c.IPv6SubnetMax.Less(c.IPv6SubnetMin) {
		return badField("IPv6SubnetMax", "%v is below IPv6SubnetMin %v", c.IPv6SubnetMax, c.IPv6SubnetMin)
	}
	return nil
}

// boundaryV6 parses IPv6SubnetMin or IPv6SubnetMax (def when empty) and checks it lies
// in IPv6Network on an IPv6SubnetLen boundary.
func (c *Config) boundaryV6(field, s string, def netip.Addr) (netip.Addr, error) {
	if s == "" {
		return def, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" {
		return a, badField(field, "%q is not an IPv6 address", s)
	}
	if !c.IPv6Network.Contains(a) {
		return a, badField(field, "%v is outside IPv6Network %v", a, c.IPv6Network)
	}
	if netip.PrefixFrom(a, c.IPv6SubnetLen).Masked().Addr() != a {
		return a, badField(field, "%v is not on a /%d boundary", a, c.IPv6SubnetLen)
	}
	return a, nil
}

// InRangeV6 reports whether p is an IPv6 subnet of this network that may be leased:
// of length IPv6SubnetLen, aligned, and between IPv6SubnetMin and IPv6SubnetMax.
func (c *Config) InRangeV6(p netip.Prefix) bool {
	a := p.Addr()
	return c.EnableIPv6 && p.Bits() == c.IPv6SubnetLen && p.Masked() == p && c.IPv6Network.Contains(a) &&
		!a.Less(c.IPv6SubnetMin) && !c.IPv6SubnetMax.Less(a)
}

// Usable reports whether a lease named k has a subnet of a family c enables: what a
// backend of this network can route to.
func (c *Config) Usable(k Key) bool {
	return c.EnableIPv4 && k.Subnet.IsValid() || c.EnableIPv6 && k.IPv6Subnet.IsValid()
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
