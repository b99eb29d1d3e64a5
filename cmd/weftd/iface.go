package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/weftnet/weft/encap"
)

// errNoInterface is returned when no interface matches what the flags ask for.
var errNoInterface = errors.New("no usable external interface")

// ifaceChoice is what the interface flags ask for.
type ifaceChoice struct {
	ifaces   []string // --iface: names or IPs, tried in order
	regexes  []string // --iface-regex: tried in order after every --iface
	canReach string   // --iface-can-reach: the interface of the route to this IP, tried last
	publicIP string   // --public-ip: the address peers send to
}

// externalInterface picks the interface inter-host traffic leaves by, in flanneld's
// order: the first --iface (name or IP) that exists with an IPv4 address, else the first
// --iface-regex that matches an address or a name, else the interface of the route to
// --iface-can-reach. When none of the three is given: the interface holding --public-ip
// if one does, else the interface of the default route. publicIP overrides the address
// peers send to.
func externalInterface(c ifaceChoice) (encap.ExternalInterface, error) {
	ext, err := chooseInterface(c)
	if err != nil {
		return ext, err
	}
	ext.PublicIP = ext.IfaceIP
	if c.publicIP != "" {
		ip, perr := netip.ParseAddr(c.publicIP)
		if perr != nil || !ip.Is4() {
			return ext, fmt.Errorf("--public-ip=%q: not an IPv4 address", c.publicIP)
		}
		ext.PublicIP = ip
	}
	return ext, nil
}

func chooseInterface(c ifaceChoice) (encap.ExternalInterface, error) {
	if len(c.ifaces) == 0 && len(c.regexes) == 0 && c.canReach == "" {
		if ip, err := netip.ParseAddr(c.publicIP); err == nil {
			if ext, err := byAddr(func(a netip.Addr) bool { return a == ip }); err == nil {
				return ext, nil
			}
		}
		return defaultRouteInterface()
	}
	var tried []string
	for _, s := range c.ifaces {
		ext, err := lookupIface(s)
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
		ext, err := matchRegex(re)
		if err == nil {
			return ext, nil
		}
		tried = append(tried, fmt.Sprintf("--iface-regex=%s: %v", expr, err))
	}
	if c.canReach != "" {
		ext, err := routeTo(c.canReach)
		if err == nil {
			return ext, nil
		}
		tried = append(tried, fmt.Sprintf("--iface-can-reach=%s: %v", c.canReach, err))
	}
	return encap.ExternalInterface{}, fmt.Errorf("%w: %s", errNoInterface, strings.Join(tried, "; "))
}

// lookupIface finds one --iface value: an IPv4 address held by an interface, or a name.
func lookupIface(s string) (encap.ExternalInterface, error) {
	if ip, err := netip.ParseAddr(s); err == nil {
		return byAddr(func(a netip.Addr) bool { return a == ip })
	}
	l, err := netlink.LinkByName(s)
	if err != nil {
		return encap.ExternalInterface{}, fmt.Errorf("no such interface: %w", err)
	}
	return fromLink(l)
}

// matchRegex finds, as flanneld does, first an interface with an IPv4 address that re
// matches, then an interface whose name it matches.
func matchRegex(re *regexp.Regexp) (encap.ExternalInterface, error) {
	if ext, err := byAddr(func(a netip.Addr) bool { return re.MatchString(a.String()) }); err == nil {
		return ext, nil
	}
	links, err := netlink.LinkList()
	if err != nil {
		return encap.ExternalInterface{}, fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		if re.MatchString(l.Attrs().Name) {
			return fromLink(l)
		}
	}
	return encap.ExternalInterface{}, errors.New("matches no interface name or IPv4 address")
}

// routeTo is the interface (and source address) of the route to dst, as `ip route get`.
func routeTo(dst string) (encap.ExternalInterface, error) {
	ip := net.ParseIP(dst)
	if ip == nil || ip.To4() == nil {
		return encap.ExternalInterface{}, errors.New("not an IPv4 address")
	}
	routes, err := netlink.RouteGet(ip)
	if err != nil {
		return encap.ExternalInterface{}, fmt.Errorf("route to %v: %w", ip, err)
	}
	for _, r := range routes {
		l, err := netlink.LinkByIndex(r.LinkIndex)
		if err != nil {
			continue
		}
		ext, err := fromLink(l)
		if err != nil {
			return ext, err
		}
		if src, ok := netip.AddrFromSlice(r.Src.To4()); ok && src.IsValid() {
			ext.IfaceIP = src
		}
		return ext, nil
	}
	return encap.ExternalInterface{}, fmt.Errorf("no route to %v", ip)
}

func defaultRouteInterface() (encap.ExternalInterface, error) {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return encap.ExternalInterface{}, fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		if (r.Dst == nil || r.Dst.IP.IsUnspecified() && isZeroMask(r.Dst.Mask)) && r.LinkIndex > 0 {
			l, err := netlink.LinkByIndex(r.LinkIndex)
			if err != nil {
				continue
			}
			return fromLink(l)
		}
	}
	return encap.ExternalInterface{}, fmt.Errorf("%w: no default route; name one with --iface", errNoInterface)
}

func isZeroMask(m net.IPMask) bool {
	ones, _ := m.Size()
	return ones == 0
}

func byAddr(match func(netip.Addr) bool) (encap.ExternalInterface, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return encap.ExternalInterface{}, fmt.Errorf("list addresses: %w", err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if !ok || !match(ip) {
			continue
		}
		l, err := netlink.LinkByIndex(a.LinkIndex)
		if err != nil {
			continue
		}
		ext, err := fromLink(l)
		if err != nil {
			continue
		}
		ext.IfaceIP = ip
		return ext, nil
	}
	return encap.ExternalInterface{}, fmt.Errorf("%w: no interface holds a matching IPv4 address", errNoInterface)
}

func fromLink(l netlink.Link) (encap.ExternalInterface, error) {
	attrs := l.Attrs()
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return encap.ExternalInterface{}, fmt.Errorf("addresses of %s: %w", attrs.Name, err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && ip.IsGlobalUnicast() {
			return encap.ExternalInterface{Name: attrs.Name, Index: attrs.Index, MTU: attrs.MTU, IfaceIP: ip}, nil
		}
	}
	return encap.ExternalInterface{}, fmt.Errorf("%w: %s has no IPv4 address", errNoInterface, attrs.Name)
}
