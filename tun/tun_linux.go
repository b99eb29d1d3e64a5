package tun

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/songgao/water"
	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/internal/ipconv"
)

// Device is an open TUN device and its queues.
type Device struct {
	name    string
	queues  []*Queue
	h       *netlink.Handle // bound to the network namespace Open ran in
	log     *zap.Logger
	persist bool
	found   bool // Open attached to a device that was already there
}

// Open creates (or attaches to) the TUN device cfg.Name and opens its queues. When the
// kernel refuses a multi-queue device, it falls back to one queue and logs why. A stale
// device of the same name that cannot be attached to is removed and made again.
func Open(cfg Config, log *zap.Logger) (*Device, error) {
	if cfg.Name == "" || len(cfg.Name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("tun %q: bad device name", cfg.Name)
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("tun %s: netlink handle: %w", cfg.Name, err)
	}
	d := &Device{name: cfg.Name, h: h, log: log, persist: cfg.Persist}
	if l, err := h.LinkByName(cfg.Name); err == nil && l.Type() == "tuntap" {
		d.found = true
	}
	n := max(cfg.Queues, 1)
	mq := n > 1 && !cfg.NoMultiQueue
	if !mq {
		n = 1
	}
	open := openQueue
	if cfg.Offload {
		open = func(name string, mq bool) (*Queue, error) { return openOffloadQueue(name, mq, !cfg.NoUSO) }
	}
	q, err := open(cfg.Name, mq)
	if err != nil && cfg.Offload {
		log.Warn("TUN offloads refused; plain queues", zap.String("dev", cfg.Name), zap.Error(err))
		open = openQueue
		q, err = open(cfg.Name, mq)
	}
	if err != nil && mq {
		log.Warn("multi-queue TUN refused; using one queue", zap.String("dev", cfg.Name), zap.Error(err))
		mq, n = false, 1
		q, err = open(cfg.Name, false)
	}
	if err != nil && d.removeStale() {
		d.found = false
		q, err = open(cfg.Name, mq)
	}
	if err != nil {
		d.Remove()
		return nil, err
	}
	d.queues = append(d.queues, q)
	for len(d.queues) < n {
		q, err := open(cfg.Name, true)
		if err != nil {
			d.Remove()
			return nil, err
		}
		d.queues = append(d.queues, q)
	}
	if err := q.setPersist(cfg.Persist); err != nil {
		d.Remove()
		return nil, err
	}
	if cfg.TxQueueLen > 0 {
		link, err := d.link()
		if err == nil {
			err = d.h.LinkSetTxQLen(link, cfg.TxQueueLen)
		}
		if err != nil {
			d.Remove()
			return nil, fmt.Errorf("tun %s: set txqueuelen %d: %w", d.name, cfg.TxQueueLen, err)
		}
	}
	log.Info("TUN device open", zap.String("dev", d.name), zap.Int("queues", len(d.queues)),
		zap.Bool("multiqueue", mq), zap.Bool("offload", d.queues[0].vnet), zap.Bool("uso", d.queues[0].uso),
		zap.Bool("persist", cfg.Persist), zap.Bool("found", d.found))
	return d, nil
}

// Found says whether Open attached to a device that was already there (a persistent
// one an earlier process left) instead of making it.
func (d *Device) Found() bool { return d.found }

func openQueue(name string, mq bool) (*Queue, error) {
	ifc, err := water.New(water.Config{
		DeviceType:             water.TUN,
		PlatformSpecificParams: water.PlatformSpecificParams{Name: name, MultiQueue: mq},
	})
	if err != nil {
		return nil, fmt.Errorf("tun %s: open queue: %w", name, err)
	}
	f, ok := ifc.ReadWriteCloser.(*os.File)
	if !ok {
		ifc.Close()
		return nil, fmt.Errorf("tun %s: open queue: water returned %T, not a file", name, ifc.ReadWriteCloser)
	}
	return newQueue(name, f)
}

// removeStale deletes a device of our name left behind (e.g. by a crashed flanneld
// with persist set) and reports whether it did.
func (d *Device) removeStale() bool {
	link, err := d.h.LinkByName(d.name)
	if err != nil || link.Type() != "tuntap" {
		return false
	}
	if err := d.h.LinkDel(link); err != nil {
		return false
	}
	d.log.Warn("removed stale TUN device", zap.String("dev", d.name))
	return true
}

// Queues are the device's queues; each must be read by one goroutine at a time and
// written by one goroutine at a time.
func (d *Device) Queues() []*Queue { return d.queues }

func (d *Device) link() (netlink.Link, error) { return d.h.LinkByName(d.name) }

// Configure gives the device its address (as /32, replacing any other IPv4 address),
// MTU and routes, and sets it up. Calling it again with a new Setup moves the device
// to it.
func (d *Device) Configure(s Setup) error {
	link, err := d.link()
	if err != nil {
		return fmt.Errorf("tun %s: find link: %w", d.name, err)
	}
	if s.MTU > 0 {
		if err := d.h.LinkSetMTU(link, s.MTU); err != nil {
			return fmt.Errorf("tun %s: set mtu %d: %w", d.name, s.MTU, err)
		}
	}
	if s.Addr.IsValid() || !s.Addr6.IsValid() {
		if err := d.setAddr4(link, s.Addr); err != nil {
			return err
		}
	}
	if s.Addr6.IsValid() {
		if !s.Addr6.Is6() || s.Addr6.Is4In6() {
			return fmt.Errorf("tun %s: address %v is not IPv6", d.name, s.Addr6)
		}
		// No duplicate address detection: a point-to-point device has no neighbours,
		// and a tentative address could not be used for the first second.
		addrs6, err := d.h.AddrList(link, unix.AF_INET6)
		if err != nil {
			return fmt.Errorf("tun %s: list IPv6 addresses: %w", d.name, err)
		}
		for _, a := range addrs6 { // an earlier lease's address (the kernel's link-local ones stay)
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip != s.Addr6 && !ip.IsLinkLocalUnicast() {
				if err := d.h.AddrDel(link, &a); err != nil {
					return fmt.Errorf("tun %s: remove old address %v: %w", d.name, ip, err)
				}
			}
		}
		a6 := &netlink.Addr{IPNet: ipconv.IPNet(netip.PrefixFrom(s.Addr6, 128)), Flags: unix.IFA_F_NODAD}
		if err := d.h.AddrReplace(link, a6); err != nil {
			return fmt.Errorf("tun %s: add address %v/128: %w", d.name, s.Addr6, err)
		}
	}
	if err := d.h.LinkSetUp(link); err != nil {
		return fmt.Errorf("tun %s: set up: %w", d.name, err)
	}
	for _, r := range s.Routes {
		// Scope universe, as flanneld adds its flannel0 route.
		rt := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: ipconv.IPNet(r.Masked()), Scope: netlink.SCOPE_UNIVERSE}
		if err := d.h.RouteReplace(rt); err != nil {
			return fmt.Errorf("tun %s: route %v: %w", d.name, r, err)
		}
	}
	return nil
}

// setAddr4 gives the device addr as its only IPv4 address, a /32.
func (d *Device) setAddr4(link netlink.Link, addr netip.Addr) error {
	if !addr.Is4() {
		return fmt.Errorf("tun %s: address %v is not IPv4", d.name, addr)
	}
	addrs, err := d.h.AddrList(link, unix.AF_INET)
	if err != nil {
		return fmt.Errorf("tun %s: list addresses: %w", d.name, err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && ip != addr {
			if err := d.h.AddrDel(link, &a); err != nil {
				return fmt.Errorf("tun %s: remove old address %v: %w", d.name, ip, err)
			}
		}
	}
	a := &netlink.Addr{IPNet: ipconv.IPNet(netip.PrefixFrom(addr, 32))}
	if err := d.h.AddrReplace(link, a); err != nil {
		return fmt.Errorf("tun %s: add address %v/32: %w", d.name, addr, err)
	}
	return nil
}

// Close closes every queue. A device opened with Persist stays, with its addresses and
// routes, for the next process (until then the kernel drops what is routed to it); any
// other goes, as Remove makes sure.
func (d *Device) Close() error {
	if !d.persist {
		return d.Remove()
	}
	err := d.closeQueues()
	if d.h != nil {
		d.h.Close()
		d.h = nil
	}
	return err
}

func (d *Device) closeQueues() error {
	var errs []error
	for _, q := range d.queues {
		errs = append(errs, q.Close())
	}
	d.queues = nil
	return errors.Join(errs...)
}

// Remove closes every queue and deletes the device, persistent or not.
func (d *Device) Remove() error {
	errs := []error{d.closeQueues()}
	if d.h != nil {
		// The kernel removes a non-persistent device with its last queue; make sure,
		// and delete a persistent one.
		if link, err := d.link(); err == nil {
			var nf netlink.LinkNotFoundError
			if err := d.h.LinkDel(link); err != nil && !errors.As(err, &nf) && !errors.Is(err, unix.ENODEV) {
				errs = append(errs, fmt.Errorf("tun %s: delete: %w", d.name, err))
			}
		}
		d.h.Close()
		d.h = nil
	}
	return errors.Join(errs...)
}
