package udp

import (
	"fmt"
	"strconv"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/proxy"
)

// prepare is what New checks and builds before it touches the host: the options (on
// an underlay of extMTU bytes, less the IPv6 header's 20 more with EnableIPv6) and the
// subnet table, which refuses a network of more subnets than it has slots for. An
// IPv6-only network has no Network: the table gets no IPv4 side.
func prepare(cfg *lease.Config, extMTU int, tuning Tuning) (udpOptions, proxy.Config, *proxy.Table, error) {
	if cfg.EnableIPv6 {
		extMTU -= udp6ExtraHeader
	}
	opts, pcfg, err := parseUDPOptions(cfg.Backend, extMTU, tuning)
	if err != nil {
		return opts, pcfg, nil, err
	}
	table, err := proxy.NewTable(cfg.Network, cfg.SubnetLen)
	if err != nil {
		return opts, pcfg, nil, fmt.Errorf("udp backend: %w", err)
	}
	if cfg.EnableIPv6 {
		if err := table.EnableIPv6(cfg.IPv6Network, cfg.IPv6SubnetLen); err != nil {
			return opts, pcfg, nil, fmt.Errorf("udp backend: %w", err)
		}
	}
	return opts, pcfg, table, nil
}

// Check says what New would do with cfg on an external interface of ext.MTU bytes,
// and how that differs from flanneld, without building the backend: New's own checks
// (prepare), nothing opened.
func Check(cfg *lease.Config, ext encap.ExternalInterface, tuning Tuning) ([]encap.Note, error) {
	opts, _, _, err := prepare(cfg, ext.MTU, tuning)
	if err != nil {
		return nil, err
	}
	mtu := fmt.Sprintf("MTU %d (the %d-byte underlay's less 28", opts.MTU, ext.MTU)
	if cfg.EnableIPv6 {
		mtu = fmt.Sprintf("MTU %d (the %d-byte underlay's less 48, room for an IPv6 outer header", opts.MTU, ext.MTU)
	}
	if encap.Given(cfg.Backend, "MTU") {
		mtu = fmt.Sprintf("MTU %d (the Backend's MTU", opts.MTU)
	}
	workersWhy := ""
	if !encap.Given(cfg.Backend, "Workers") {
		workersWhy = " (as many as this machine's CPUs, at most " + strconv.Itoa(maxUDPWorkers) + ")"
	}
	notes := []encap.Note{
		encap.Do(fmt.Sprintf("%s: a TUN device carrying the overlay in UDP datagrams on port %d, %s; FLANNEL_MTU)",
			UDPDevice, opts.Port, mtu)),
		encap.Do(fmt.Sprintf("%d workers%s (one queue of %s and one socket each), busy polling %s",
			opts.Workers, workersWhy, UDPDevice, busyPoll(opts))),
		encap.Differs("lease-backend-type", `the lease says "BackendType":"udp"; flanneld writes no type for udp (it reads both)`),
		encap.Differs("tun-multiqueue", UDPDevice+" is opened multi-queue with a virtio-net header (offloads); flanneld's has one plain queue"),
	}
	if encap.Given(cfg.Backend, "MTU") {
		notes = append(notes, encap.Differs("udp-mtu-option",
			"flanneld's udp backend has no MTU option: it ignores the key and uses the underlay's MTU less 28"))
	}
	if encap.Given(cfg.Backend, "Workers") || encap.Given(cfg.Backend, "BusyPoll") {
		notes = append(notes, encap.Differs("`BusyPoll` and `Workers`", "Workers and BusyPoll are weft's own options; flanneld ignores them"))
	}
	if cfg.EnableIPv6 {
		notes = append(notes, encap.Differs("IPv6 and dual stack",
			"udp carries IPv6 inner packets too (flannel0 gets the IPv6 route); flanneld's udp backend is IPv4-only"))
	}
	return notes, nil
}

func busyPoll(o udpOptions) string {
	if o.BusyPoll == 0 {
		return "off"
	}
	return o.BusyPoll.String()
}
