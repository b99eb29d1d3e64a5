package wireguard

import (
	"encoding/json"
	"fmt"
	"strings"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/transport/relay"
)

// parseOptions reads the Backend object as New does, with flanneld's defaults (ports
// 51820 and 51821, MTU the underlay's: extMTU, Mode separate) and tuning's Device and
// path port, and checks them: the Mode, the Device, the ports, the MTU left for the
// device, the keepalive and the PSK. It returns the options, the PSK (nil: none) and
// the path socket's port (negative: none); errors wrap encap.ErrBadOption and name
// the option.
func parseOptions(raw json.RawMessage, extMTU int, tuning Tuning) (wireguardOptions, *wgtypes.Key, int, error) {
	o := wireguardOptions{ListenPort: DefaultListenPort, ListenPortV6: DefaultListenPortV6, MTU: extMTU, Mode: wgSeparate, Device: Auto}
	if err := encap.DecodeOptions(wireguardType, raw, &o); err != nil {
		return o, nil, 0, err
	}
	if tuning.Device != "" {
		o.Device = tuning.Device
	}
	switch o.Mode {
	case wgSeparate, wgModeAuto, wgModeIPv4, wgModeIPv6:
	default:
		return o, nil, 0, fmt.Errorf("%w: wireguard backend: Mode %q is not separate, auto, ipv4 or ipv6", encap.ErrBadOption, o.Mode)
	}
	switch o.Device {
	case Auto, Kernel, Userspace:
	default:
		return o, nil, 0, fmt.Errorf("%w: wireguard backend: Device %q is not auto, kernel or userspace", encap.ErrBadOption, o.Device)
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"ListenPort", o.ListenPort}, {"ListenPortV6", o.ListenPortV6}} {
		if p.v < 1 || p.v > 65535 {
			return o, nil, 0, fmt.Errorf("%w: wireguard backend: %s %d is not in 1-65535", encap.ErrBadOption, p.name, p.v)
		}
	}
	if o.MTU-wgOverhead < 576 {
		return o, nil, 0, fmt.Errorf("%w: wireguard backend: MTU %d leaves %d for the device, less than 576", encap.ErrBadOption, o.MTU, o.MTU-wgOverhead)
	}
	if o.PersistentKeepaliveInterval < 0 || o.PersistentKeepaliveInterval > 65535 {
		return o, nil, 0, fmt.Errorf("%w: wireguard backend: PersistentKeepaliveInterval %d is not in 0-65535 (seconds)", encap.ErrBadOption, o.PersistentKeepaliveInterval)
	}
	pathPort := tuning.PathPort
	if pathPort == 0 {
		pathPort = relay.DefaultPort
	}
	if pathPort > 65535 {
		return o, nil, 0, fmt.Errorf("%w: wireguard backend: path port %d is not in 1-65535", encap.ErrBadOption, pathPort)
	}
	if o.PSK == "" {
		return o, nil, pathPort, nil
	}
	psk, err := wgtypes.ParseKey(o.PSK)
	if err != nil {
		return o, nil, 0, fmt.Errorf("%w: wireguard backend: PSK: %w", encap.ErrBadOption, err)
	}
	return o, &psk, pathPort, nil
}

// Check says what New would do with cfg on an external interface of ext.MTU bytes,
// and how that differs from flanneld, without building the backend: New's option
// checks (parseOptions); no key is read or made, no device touched.
func Check(cfg *lease.Config, ext encap.ExternalInterface, tuning Tuning) ([]encap.Note, error) {
	o, psk, pathPort, err := parseOptions(cfg.Backend, ext.MTU, tuning)
	if err != nil {
		return nil, err
	}
	under := fmt.Sprintf("the %d-byte underlay's", o.MTU)
	if encap.Given(cfg.Backend, "MTU") {
		under = fmt.Sprintf("the Backend's MTU %d", o.MTU)
	}
	var devs []string
	switch {
	case o.Mode != wgSeparate:
		devs = []string{fmt.Sprintf("%s (Mode %s: one device for both families, UDP port %d)", Device, o.Mode, o.ListenPort)}
	default:
		if cfg.EnableIPv4 {
			devs = append(devs, fmt.Sprintf("%s (IPv4, UDP port %d)", Device, o.ListenPort))
		}
		if cfg.EnableIPv6 {
			devs = append(devs, fmt.Sprintf("%s (IPv6, UDP port %d)", DeviceV6, o.ListenPortV6))
		}
	}
	keepalive, pskSays := "off", "no PSK"
	if o.PersistentKeepaliveInterval > 0 {
		keepalive = fmt.Sprintf("%d s", o.PersistentKeepaliveInterval)
	}
	if psk != nil {
		pskSays = "a PSK"
	}
	notes := []encap.Note{
		encap.Do(fmt.Sprintf("%s; MTU %d (%s less %d), %s, persistent keepalive %s",
			strings.Join(devs, " and "), o.MTU-wgOverhead, under, wgOverhead, pskSays, keepalive)),
		encap.Do(fmt.Sprintf("device: %s (auto: the kernel's WireGuard when it has it, else wireguard-go in weftd); "+
			"the private key in %s (or WIREGUARD_KEY_FILE), made once", o.Device, DefaultKeyFile)),
		encap.Differs("The wireguard backend", "without the kernel module weftd runs the device in userspace where flanneld fails; "+
			"Device (and WEFT_WG_DEVICE) is weft's own; bad options stop weftd at start, naming the option"),
	}
	if pathPort > 0 {
		notes = append(notes, encap.Differs("Sites", fmt.Sprintf("weftd opens UDP %d (the path socket: NAT discovery, punching, relaying) "+
			"beside WireGuard's port; flanneld does not", pathPort)))
	}
	if o.Mode != wgSeparate {
		notes = append(notes, encap.Differs("The wireguard backend", "in the one-device Modes a peer is reached over IPv6 on its ListenPort, "+
			"where its device listens; flanneld dials the ListenPortV6 of BackendV6Data"))
	}
	return notes, nil
}

// DefaultListenPort and DefaultListenPortV6 are the WireGuard ports without the
// ListenPort and ListenPortV6 options, as flanneld's.
const (
	DefaultListenPort   = 51820
	DefaultListenPortV6 = 51821
)
