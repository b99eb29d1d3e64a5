package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"

	"github.com/vishvananda/netlink"

	"github.com/weftnet/weft/encap"
)

// errNoInterface is returned when no interface matches what the flags ask for.
var errNoInterface = errors.New("no usable external interface")

// externalInterface picks the interface inter-host traffic leaves by: the first of
// --iface (name or IP) that exists, else the first matching --iface-regex, else the
// interface of the default route. publicIP overrides the address peers send to.
func externalInterface(ifaces, regexes []string, publicIP string) (encap.ExternalInterface, error) {
	var ext encap.ExternalInterface
	var err error
	switch {
	case len(ifaces) > 0:
		ext, err = firstOf(ifaces)
	case len(regexes) > 0:
		ext, err = firstMatching(regexes)
	default:
		ext, err = defaultRouteInterface()
	}
	if err != nil {
		return ext, err
	}
	ext.PublicIP = ext.IfaceIP
	if publicIP != "" {
		ip, perr := netip.ParseAddr(publicIP)
		if perr != nil || !ip.Is4() {
			return ext, fmt.Errorf("--public-ip=%q: not an IPv4 address", publicIP)
		}
		ext.PublicIP = ip
	}
	return ext, nil
}

func firstOf(ifaces []string) (encap.ExternalInterface, error) {
	for _, s := range ifaces {
		if ip, err := netip.ParseAddr(s); err == nil {
			if ext, err := byAddr(func(a netip.Addr) bool { return a == ip }); err == nil {
				return ext, nil
			}
			continue
		}
		if l, err := netlink.LinkByName(s); err == nil {
			if ext, err := fromLink(l); err == nil {
				return ext, nil
			}
		}
	}
	return encap.ExternalInterface{}, fmt.Errorf("%w: none of --iface %v exists with an IPv4 address", errNoInterface, ifaces)
}

func firstMatching(regexes []string) (encap.ExternalInterface, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return encap.ExternalInterface{}, fmt.Errorf("list links: %w", err)
	}
	for _, expr := range regexes {
		re, err := regexp.Compile(expr)
		if err != nil {
			return encap.ExternalInterface{}, fmt.Errorf("--iface-regex=%q: %w", expr, err)
		}
		for _, l := range links {
			if re.MatchString(l.Attrs().Name) {
				if ext, err := fromLink(l); err == nil {
					return ext, nil
				}
			}
		}
		if ext, err := byAddr(func(a netip.Addr) bool { return re.MatchString(a.String()) }); err == nil {
			return ext, nil
		}
	}
	return encap.ExternalInterface{}, fmt.Errorf("%w: nothing matches --iface-regex %v", errNoInterface, regexes)
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
	return encap.ExternalInterface{}, errNoInterface
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
