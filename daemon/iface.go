package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/encap"
)

// errNoInterface is returned when no interface matches what the flags ask for.
var errNoInterface = errors.New("no usable external interface")

// ifaceChoice is what the interface flags ask for.
type ifaceChoice struct {
	ifaces     []string // --iface: names or IPs, tried in order
	regexes    []string // --iface-regex: tried in order after every --iface
	canReach   string   // --iface-can-reach: the interface of the route to this IP, tried last
	publicIP   string   // --public-ip: the address peers send to
	publicIPv6 string   // --public-ipv6: the address peers send to over IPv6
	// The address families the network needs: IPv6 with EnableIPv6, and no IPv4 on an
	// IPv6-only network. The zero value is an IPv4 network.
	ipv6, noIPv4 bool
}

// families is the set of address families c needs.
func (c ifaceChoice) families() families { return families{v4: !c.noIPv4, v6: c.ipv6} }

// families says which addresses an interface must have: IPv4, IPv6 or both.
type families struct{ v4, v6 bool }

func (f families) String() string {
	switch {
	case f.v4 && f.v6:
		return "IPv4 and IPv6"
	case f.v6:
		return "IPv6"
	}
	return "IPv4"
}

// externalInterface picks the interface inter-host traffic leaves by, in flanneld's
// order: the first --iface (name or IP) that exists with an address of each family the
// network needs, else the first --iface-regex that matches an address (on a dual-stack
// network: an IPv4 and an IPv6 address of one interface) or a name, else the interface
// of the route to --iface-can-reach. When none of the three is given: the interface
// holding --public-ip (--public-ipv6 on an IPv6-only network) if one does, else the
// interface of the default route (on a dual-stack network the IPv4 and IPv6 default
// routes must leave by the same one, as flanneld requires). publicIP and publicIPv6
// override the addresses peers send to.
func externalInterface(c ifaceChoice) (encap.ExternalInterface, error) {
	ext, err := chooseInterface(c)
	if err != nil {
		return ext, err
	}
	return withPublicIPs(c, ext)
}

// withPublicIPs sets ext's public addresses: its own, or the ones c names.
func withPublicIPs(c ifaceChoice, ext encap.ExternalInterface) (encap.ExternalInterface, error) {
	ext.PublicIP = ext.IfaceIP
	if c.noIPv4 {
		ext.PublicIP = netip.IPv4Unspecified() // flanneld's PublicIP of an IPv6-only lease
	} else if c.publicIP != "" {
		ip, perr := netip.ParseAddr(c.publicIP)
		if perr != nil || !ip.Is4() {
			return ext, fmt.Errorf("--public-ip=%q: not an IPv4 address", c.publicIP)
		}
		ext.PublicIP = ip
	}
	if c.ipv6 {
		ext.PublicIPv6 = ext.IfaceIPv6
		if c.publicIPv6 != "" {
			ip, perr := parseIPv6(c.publicIPv6)
			if perr != nil {
				return ext, fmt.Errorf("--public-ipv6=%q: %w", c.publicIPv6, perr)
			}
			ext.PublicIPv6 = ip
		}
	}
	return ext, nil
}

// parseIPv6 parses a plain IPv6 address (not IPv4-mapped, no zone).
func parseIPv6(s string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(s)
	if err != nil || !ip.Is6() || ip.Is4In6() || ip.Zone() != "" {
		return netip.Addr{}, errors.New("not an IPv6 address")
	}
	return ip, nil
}

func chooseInterface(c ifaceChoice) (encap.ExternalInterface, error) {
	fam := c.families()
	if len(c.ifaces) == 0 && len(c.regexes) == 0 && c.canReach == "" {
		pub := c.publicIP
		if c.noIPv4 {
			pub = c.publicIPv6
		}
		if ip, err := netip.ParseAddr(pub); err == nil {
			if ext, err := byAddr(fam, func(a netip.Addr) bool { return a == ip }); err == nil {
				return ext, nil
			}
		}
		return defaultRouteInterface(fam)
	}
	var tried []string
	for _, s := range c.ifaces {
		ext, err := lookupIface(fam, s)
		if err == nil {
			return ext, nil
		}
		tried = append(tried, fmt.Sprintf("--iface=%s: %v", s, err))
	}
	for _, expr := range c.regexes {
		re, err := regexp.Compile(expr)
		if err != nil {
			// flanneld logs a bad expression and goes on to the next one; so do we,
			// but the error names it.
			tried = append(tried, fmt.Sprintf("--iface-regex=%s: %v", expr, err))
			continue
		}
		ext, err := matchRegex(fam, re)
		if err == nil {
			return ext, nil
		}
		tried = append(tried, fmt.Sprintf("--iface-regex=%s: %v", expr, err))
	}
	if c.canReach != "" {
		ext, err := routeTo(fam, c.canReach)
		if err == nil {
			return ext, nil
		}
		tried = append(tried, fmt.Sprintf("--iface-can-reach=%s: %v", c.canReach, err))
	}
	return encap.ExternalInterface{}, fmt.Errorf("%w: %s", errNoInterface, strings.Join(tried, "; "))
}

// lookupIface finds one --iface value: an address held by an interface, or a name.
func lookupIface(fam families, s string) (encap.ExternalInterface, error) {
	if ip, err := netip.ParseAddr(s); err == nil {
		return byAddr(fam, func(a netip.Addr) bool { return a == ip })
	}
	l, err := netlink.LinkByName(s)
	if err != nil {
		return encap.ExternalInterface{}, fmt.Errorf("no such interface: %w", err)
	}
	return fromLink(fam, l)
}

// matchRegex finds, as flanneld does, first an interface with an address that re
// matches (on a dual-stack network: an IPv4 and an IPv6 address), then an interface
// whose name it matches.
func matchRegex(fam families, re *regexp.Regexp) (encap.ExternalInterface, error) {
	match := func(a netip.Addr) bool { return re.MatchString(a.String()) }
	if ext, err := byAddr(fam, match); err == nil {
		if !fam.v4 || !fam.v6 || match(ext.IfaceIPv6) {
			return ext, nil
		}
		// Dual stack: the IPv4 address matched; the IPv6 one must too.
		if ext6, err := byAddr(families{v6: true}, match); err == nil && ext6.Index == ext.Index {
			ext.IfaceIPv6 = ext6.IfaceIPv6
			return ext, nil
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		return encap.ExternalInterface{}, fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		if re.MatchString(l.Attrs().Name) {
			return fromLink(fam, l)
		}
	}
	return encap.ExternalInterface{}, fmt.Errorf("matches no interface name or %s address", fam)
}

// routeTo is the interface (and source address) of the route to dst, as `ip route get`.
func routeTo(fam families, dst string) (encap.ExternalInterface, error) {
	ip, err := netip.ParseAddr(dst)
	if err != nil || ip.Zone() != "" {
		return encap.ExternalInterface{}, errors.New("not an IP address")
	}
	ip = ip.Unmap()
	routes, err := netlink.RouteGet(net.IP(ip.AsSlice()))
	if err != nil {
		return encap.ExternalInterface{}, fmt.Errorf("route to %v: %w", ip, err)
	}
	for _, r := range routes {
		l, err := netlink.LinkByIndex(r.LinkIndex)
		if err != nil {
			continue
		}
		ext, err := fromLink(fam, l)
		if err != nil {
			return ext, err
		}
		if src, ok := netip.AddrFromSlice(r.Src); ok && src.IsValid() {
			if src = src.Unmap(); src.Is4() && fam.v4 {
				ext.IfaceIP = src
			} else if src.Is6() && fam.v6 {
				ext.IfaceIPv6 = src
			}
		}
		return ext, nil
	}
	return encap.ExternalInterface{}, fmt.Errorf("no route to %v", ip)
}

// defaultRouteInterface is the interface of the default route of each family fam
// needs; on a dual-stack network both must be the same interface.
func defaultRouteInterface(fam families) (encap.ExternalInterface, error) {
	var idx4, idx6 int
	var err error
	if fam.v4 {
		if idx4, err = defaultRouteLink(netlink.FAMILY_V4); err != nil {
			return encap.ExternalInterface{}, err
		}
	}
	if fam.v6 {
		if idx6, err = defaultRouteLink(netlink.FAMILY_V6); err != nil {
			return encap.ExternalInterface{}, err
		}
	}
	idx := idx4
	if !fam.v4 {
		idx = idx6
	} else if fam.v6 && idx6 != idx4 {
		return encap.ExternalInterface{}, fmt.Errorf("%w: the IPv4 and IPv6 default routes leave by different interfaces (%s, %s); name one with --iface",
			errNoInterface, linkName(idx4), linkName(idx6))
	}
	l, err := netlink.LinkByIndex(idx)
	if err != nil {
		return encap.ExternalInterface{}, fmt.Errorf("default route interface: %w", err)
	}
	return fromLink(fam, l)
}

func linkName(idx int) string {
	if l, err := netlink.LinkByIndex(idx); err == nil {
		return l.Attrs().Name
	}
	return fmt.Sprintf("index %d", idx)
}

// defaultRouteLink is the link index of the default route of family.
func defaultRouteLink(family int) (int, error) {
	routes, err := netlink.RouteList(nil, family)
	if err != nil {
		return 0, fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		if (r.Dst == nil || r.Dst.IP.IsUnspecified() && isZeroMask(r.Dst.Mask)) && r.LinkIndex > 0 {
			return r.LinkIndex, nil
		}
	}
	name := "IPv4"
	if family == netlink.FAMILY_V6 {
		name = "IPv6"
	}
	return 0, fmt.Errorf("%w: no %s default route; name one with --iface", errNoInterface, name)
}

func isZeroMask(m net.IPMask) bool {
	ones, _ := m.Size()
	return ones == 0
}

// byAddr finds the interface holding an address match accepts (of a family fam
// needs), with that address, and the other family's from the same interface.
func byAddr(fam families, match func(netip.Addr) bool) (encap.ExternalInterface, error) {
	for _, f := range []struct {
		on     bool
		family int
		v6     bool
	}{{fam.v4, netlink.FAMILY_V4, false}, {fam.v6, netlink.FAMILY_V6, true}} {
		if !f.on {
			continue
		}
		addrs, err := netlink.AddrList(nil, f.family)
		if err != nil {
			return encap.ExternalInterface{}, fmt.Errorf("list addresses: %w", err)
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok || !match(ip.Unmap()) {
				continue
			}
			ip = ip.Unmap()
			l, err := netlink.LinkByIndex(a.LinkIndex)
			if err != nil {
				continue
			}
			ext, err := fromLink(fam, l)
			if err != nil {
				continue
			}
			if f.v6 {
				ext.IfaceIPv6 = ip
			} else {
				ext.IfaceIP = ip
			}
			return ext, nil
		}
	}
	return encap.ExternalInterface{}, fmt.Errorf("%w: no interface holds a matching %s address", errNoInterface, fam)
}

// fromLink is l as the external interface, with its first address of each family
// fam needs: a global unicast one, not deprecated.
func fromLink(fam families, l netlink.Link) (encap.ExternalInterface, error) {
	attrs := l.Attrs()
	ext := encap.ExternalInterface{Name: attrs.Name, Index: attrs.Index, MTU: attrs.MTU}
	if fam.v4 {
		ip, err := firstAddr(l, netlink.FAMILY_V4)
		if err != nil {
			return ext, err
		}
		ext.IfaceIP = ip
	}
	if fam.v6 {
		ip, err := firstAddr(l, netlink.FAMILY_V6)
		if err != nil {
			return ext, err
		}
		ext.IfaceIPv6 = ip
	}
	return ext, nil
}

func firstAddr(l netlink.Link, family int) (netip.Addr, error) {
	name := l.Attrs().Name
	addrs, err := netlink.AddrList(l, family)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if ok && ip.Unmap().IsGlobalUnicast() && a.Flags&unix.IFA_F_DEPRECATED == 0 {
			return ip.Unmap(), nil
		}
	}
	if family == netlink.FAMILY_V6 {
		return netip.Addr{}, fmt.Errorf("%w: %s has no IPv6 address", errNoInterface, name)
	}
	return netip.Addr{}, fmt.Errorf("%w: %s has no IPv4 address", errNoInterface, name)
}
