package vxlan

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/proxy"
)

// parseOptions reads the Backend object as New does, with flanneld's defaults (VNI 1,
// port 8472, MTU the underlay's: extMTU) and weftd's bounds; errors wrap
// encap.ErrBadOption and name the option.
func parseOptions(raw json.RawMessage, extMTU int) (vxlanOptions, error) {
	o := vxlanOptions{VNI: 1, Port: DefaultPort}
	if err := encap.DecodeOptions("vxlan", raw, &o); err != nil {
		return o, err
	}
	if err := proxy.CheckPort(o.Port); err != nil {
		return o, fmt.Errorf("%w: vxlan backend: %w", encap.ErrBadOption, err)
	}
	switch {
	case o.VNI < 0 || o.VNI > 1<<24-1:
		return o, fmt.Errorf("%w: vxlan VNI %d is not in 0..16777215", encap.ErrBadOption, o.VNI)
	case o.MTU < 0 || o.MTU > 0 && o.MTU < minVXLANMTU:
		return o, fmt.Errorf("%w: vxlan MTU %d is below %d (the underlay's MTU; %s gets %d less)",
			encap.ErrBadOption, o.MTU, minVXLANMTU, "flannel."+strconv.Itoa(o.VNI), vxlanOverhead)
	}
	if o.MTU == 0 {
		o.MTU = extMTU
	}
	return o, nil
}

// Check says what New would do with cfg on an external interface of ext.MTU bytes,
// and how that differs from flanneld, without building the backend: New's option
// checks (parseOptions), no netlink.
func Check(cfg *lease.Config, ext encap.ExternalInterface) ([]encap.Note, error) {
	o, err := parseOptions(cfg.Backend, ext.MTU)
	if err != nil {
		return nil, err
	}
	under := fmt.Sprintf("the %d-byte underlay's", o.MTU)
	if encap.Given(cfg.Backend, "MTU") {
		under = fmt.Sprintf("the Backend's MTU %d", o.MTU)
	}
	vni := strconv.Itoa(o.VNI)
	var notes []encap.Note
	if cfg.EnableIPv4 {
		notes = append(notes, encap.Do(fmt.Sprintf("flannel.%s: VXLAN device, VNI %s, UDP port %d, MTU %d (%s less %d)",
			vni, vni, o.Port, o.MTU-vxlanOverhead, under, vxlanOverhead)))
	}
	if cfg.EnableIPv6 {
		notes = append(notes, encap.Do(fmt.Sprintf("flannel-v6.%s: VXLAN device over IPv6, VNI %s, UDP port %d, MTU %d at most (%s less %d); "+
			"needs an IPv6 address on the external interface", vni, vni, o.Port, o.MTU-vxlan6Overhead, under, vxlan6Overhead)))
	}
	flags := fmt.Sprintf("GBP %t, Learning %t, DirectRouting %t", o.GBP, o.Learning, o.DirectRouting)
	if o.DirectRouting {
		flags += " (peers on our own L2 segment get a plain route instead)"
	}
	notes = append(notes, encap.Do(flags))
	if o.MacPrefix != "" {
		notes = append(notes, encap.Do(fmt.Sprintf("MacPrefix %q is ignored, as flanneld on Linux ignores it (an option of its Windows backend)", o.MacPrefix)))
	}
	notes = append(notes, encap.Differs("vxlan-local",
		"with --public-ip, the device's local address stays the interface's; flanneld uses the public IP"))
	if !cfg.EnableIPv4 {
		notes = append(notes, encap.Differs("ipv6-only-mtu",
			fmt.Sprintf("FLANNEL_MTU is flannel-v6.%s's (the underlay's less %d); flanneld writes flannel.%s's (less %d)", vni, vxlan6Overhead, vni, vxlanOverhead)))
	}
	return notes, nil
}

// DefaultPort is the VXLAN UDP port without a Port option (the Linux kernel's
// historic default, as flanneld's).
const DefaultPort = 8472
