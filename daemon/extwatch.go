package daemon

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/internal/nlwatch"
	"github.com/weftnet/weft/lease"
)

// extRecheck is how often followExternal looks again without an event: the fallback
// when a netlink subscription fails or overflows.
const extRecheck = 10 * time.Second

// followExternal follows the external interface by its name (the one found at start,
// --iface's or not), not by its index: an interface deleted and made again (a bond,
// VLAN or bridge re-created) has a new index, and may come back with another
// address. On every link update of that name and address update of its index it
// finds the interface again, and when it is back with all the addresses the network
// needs and differs from the last one seen (index or addresses), calls moved with
// the old and the new. It returns once ctx ends and netlink's goroutines are done.
func followExternal(ctx context.Context, c ifaceChoice, ext encap.ExternalInterface, log *zap.Logger,
	moved func(old, ext encap.ExternalInterface)) {
	// A subscription that fails is left out: the recheck period still finds it.
	nw, _ := nlwatch.Subscribe(nlwatch.Options{Links: true, Addrs: true,
		OnError: func(err error) { log.Debug("netlink watch of the external interface", zap.Error(err)) }})
	defer nw.Close()
	links, addrs := nw.Links, nw.Addrs
	t := time.NewTicker(extRecheck)
	defer t.Stop()
	index := ext.Index // the newest index of the name seen
	check := func() {
		next, err := findExternal(c, ext)
		if err != nil {
			return // gone, or back without its addresses yet
		}
		index = next.Index
		if sameExternal(ext, next) {
			return
		}
		old := ext
		ext = next
		moved(old, next)
	}
	check() // what changed before the subscriptions
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			check()
		case u, ok := <-links:
			if !ok {
				links = nil
				continue
			}
			if a := u.Attrs(); a != nil && (a.Name == ext.Name || a.Index == index) {
				if a.Name == ext.Name {
					index = a.Index
				}
				check()
			}
		case u, ok := <-addrs:
			if !ok {
				addrs = nil
				continue
			}
			if u.LinkIndex == index {
				check()
			}
		}
	}
}

// findExternal finds the interface named as old again, with an address of each
// family c needs (old's addresses when it still has them) and the public addresses
// c gives.
func findExternal(c ifaceChoice, old encap.ExternalInterface) (encap.ExternalInterface, error) {
	l, err := netlink.LinkByName(old.Name)
	if err != nil {
		return encap.ExternalInterface{}, err
	}
	ext, err := fromLink(c.families(), l)
	if err != nil {
		return ext, err
	}
	if old.IfaceIP.IsValid() && hasAddr(l, netlink.FAMILY_V4, old.IfaceIP) {
		ext.IfaceIP = old.IfaceIP
	}
	if old.IfaceIPv6.IsValid() && hasAddr(l, netlink.FAMILY_V6, old.IfaceIPv6) {
		ext.IfaceIPv6 = old.IfaceIPv6
	}
	return withPublicIPs(c, ext)
}

func hasAddr(l netlink.Link, family int, want netip.Addr) bool {
	addrs, err := netlink.AddrList(l, family)
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == want {
			return true
		}
	}
	return false
}

// dropConns destroys the TCP connections from addr, an address the external
// interface no longer has (SOCK_DESTROY, as Android does when an address goes): the
// kernel would retransmit into nothing for minutes, and our etcd client, whose
// connection left from it, would neither publish the new address nor see peers
// until then. Destroyed, the client connects again at once from the new address.
// Nothing is destroyed while addr is still on the host.
func (d *daemon) dropConns(addr netip.Addr) {
	if held, err := netlink.AddrList(nil, netlink.FAMILY_ALL); err == nil {
		for _, a := range held {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr {
				return
			}
		}
	}
	family := uint8(unix.AF_INET)
	if addr.Is6() {
		family = unix.AF_INET6
	}
	socks, err := netlink.SocketDiagTCP(family)
	if err != nil {
		d.log.Warn("listing TCP connections from the old address", zap.Stringer("addr", addr), zap.Error(err))
		return
	}
	n := 0
	for _, s := range socks {
		src, ok := netip.AddrFromSlice(s.ID.Source)
		if !ok || src.Unmap() != addr || s.ID.Destination == nil || s.ID.Destination.IsUnspecified() {
			continue
		}
		local := &net.TCPAddr{IP: s.ID.Source, Port: int(s.ID.SourcePort)}
		remote := &net.TCPAddr{IP: s.ID.Destination, Port: int(s.ID.DestinationPort)}
		if err := netlink.SocketDestroy(local, remote); err != nil {
			d.log.Warn("destroying a TCP connection from the old address", zap.Stringer("local", local),
				zap.Stringer("remote", remote), zap.Error(err))
			continue
		}
		n++
	}
	d.log.Info("destroyed the TCP connections from the old address", zap.Stringer("addr", addr), zap.Int("connections", n))
}

// sameExternal reports whether a and b are one interface with the same addresses.
func sameExternal(a, b encap.ExternalInterface) bool {
	return a.Index == b.Index && a.IfaceIP == b.IfaceIP && a.IfaceIPv6 == b.IfaceIPv6 &&
		a.PublicIP == b.PublicIP && a.PublicIPv6 == b.PublicIPv6
}

// externalMoved moves the backend onto the external interface found again and, when
// its public address changed, publishes it in our lease so that peers send to it.
func (d *daemon) externalMoved(mgr lease.Manager, be encap.Backend, old, ext encap.ExternalInterface) {
	d.log.Warn("the external interface changed; following it", append(extFields(ext),
		zap.Int("old-index", old.Index), zap.Int("index", ext.Index))...)
	if u, ok := be.(encap.ExternalFollower); ok {
		u.SetExternal(ext)
	}
	for _, a := range []struct{ old, new netip.Addr }{{old.IfaceIP, ext.IfaceIP}, {old.IfaceIPv6, ext.IfaceIPv6}} {
		if a.old.IsValid() && a.old != a.new {
			d.dropConns(a.old)
		}
	}
	if ext.PublicIP == old.PublicIP && ext.PublicIPv6 == old.PublicIPv6 {
		return
	}
	held := d.held.Load()
	r, ok := mgr.(lease.Republisher)
	if held == nil || !ok {
		d.log.Error("the public address changed but this lease source cannot publish it; peers still send to the old one",
			zap.Stringer("old", old.PublicIP), zap.Stringer("new", ext.PublicIP))
		return
	}
	d.republishMu.Lock()
	next := *d.held.Load()
	next.Attrs.PublicIP, next.Attrs.PublicIPv6 = ext.PublicIP, ext.PublicIPv6
	d.held.Store(&next)
	d.republishMu.Unlock()
	r.Republish(next.Attrs)
}
