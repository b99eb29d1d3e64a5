package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Defaults of the flannel CNI plugin, kept so that kube-flannel's conflist, which
// names neither, works unchanged.
const (
	defaultSubnetFile = "/run/flannel/subnet.env"
	defaultDataDir    = "/var/lib/cni/flannel"
)

// Errors the plugin wraps, so callers and tests can tell the causes apart.
var (
	ErrNetConf   = errors.New("network config")
	ErrSubnetEnv = errors.New("subnet.env")
)

// netConf is the plugin's own part of the network config. Fields the plugin does
// not know are ignored, as every CNI plugin ignores them.
type netConf struct {
	CNIVersion    string         `json:"cniVersion"`
	Name          string         `json:"name"`
	Type          string         `json:"type"`
	SubnetFile    string         `json:"subnetFile"`
	DataDir       string         `json:"dataDir"`
	Delegate      map[string]any `json:"delegate"`
	IPAM          map[string]any `json:"ipam"`
	RuntimeConfig map[string]any `json:"runtimeConfig"`
}

// parseNetConf reads the network config from the runtime's stdin and fills in the
// defaults. It checks what the delegate config is built from: a delegate may name
// its plugin type (a string) but not its name or ipam, which the plugin sets.
func parseNetConf(data []byte) (*netConf, error) {
	n := &netConf{}
	if err := json.Unmarshal(data, n); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNetConf, err)
	}
	if n.SubnetFile == "" {
		n.SubnetFile = defaultSubnetFile
	}
	if n.DataDir == "" {
		n.DataDir = defaultDataDir
	}
	if t, ok := n.Delegate["type"]; ok {
		if s, isString := t.(string); !isString || s == "" {
			return nil, fmt.Errorf("%w: delegate.type must be a plugin name (a non-empty string), not %v", ErrNetConf, t)
		}
	}
	for _, k := range []string{"name", "ipam"} {
		if _, ok := n.Delegate[k]; ok {
			return nil, fmt.Errorf("%w: delegate must not set %q: the flannel plugin sets it (put ipam options at the top level)", ErrNetConf, k)
		}
	}
	if t, ok := n.IPAM["type"]; ok {
		if s, isString := t.(string); !isString || s == "" {
			return nil, fmt.Errorf("%w: ipam.type must be a plugin name (a non-empty string), not %v", ErrNetConf, t)
		}
	}
	return n, nil
}

// subnetEnv is what the daemon (weftd or flanneld) wrote to subnet.env. At least one
// family, IPv4 or IPv6, has both a network and a subnet.
type subnetEnv struct {
	Network, Subnet     netip.Prefix // IPv4; zero when absent
	Network6, Subnet6   netip.Prefix // IPv6; zero when absent
	MTU                 int
	IPMasq              bool
	haveMTU, haveIPMasq bool
}

// parseSubnetEnv reads subnet.env: KEY=VALUE lines; blank lines, comments and keys
// it does not know are skipped. A known key with a bad value, a line that is not
// KEY=VALUE, or a missing key is an error that names it.
func parseSubnetEnv(data []byte) (*subnetEnv, error) {
	e := &subnetEnv{}
	s := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; s.Scan(); line++ {
		text := strings.TrimSpace(s.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		key, val, ok := strings.Cut(text, "=")
		if !ok {
			return nil, fmt.Errorf("%w: line %d: %q is not KEY=VALUE", ErrSubnetEnv, line, text)
		}
		var err error
		switch key {
		case "FLANNEL_NETWORK":
			e.Network, err = parsePrefix(val, false)
		case "FLANNEL_SUBNET":
			e.Subnet, err = parsePrefix(val, false)
		case "FLANNEL_IPV6_NETWORK":
			e.Network6, err = parsePrefix(val, true)
		case "FLANNEL_IPV6_SUBNET":
			e.Subnet6, err = parsePrefix(val, true)
		case "FLANNEL_MTU":
			e.MTU, err = strconv.Atoi(val)
			if err == nil && (e.MTU < 68 || e.MTU > 65535) {
				err = fmt.Errorf("%d is out of range 68-65535", e.MTU)
			}
			e.haveMTU = true
		case "FLANNEL_IPMASQ":
			e.IPMasq, err = strconv.ParseBool(val)
			e.haveIPMasq = true
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrSubnetEnv, key, err)
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSubnetEnv, err)
	}
	var missing []string
	v4 := e.Network.IsValid() || e.Subnet.IsValid()
	v6 := e.Network6.IsValid() || e.Subnet6.IsValid()
	switch {
	case !v4 && !v6:
		missing = append(missing, "FLANNEL_NETWORK", "FLANNEL_SUBNET")
	case v4 && !e.Network.IsValid():
		missing = append(missing, "FLANNEL_NETWORK")
	case v4 && !e.Subnet.IsValid():
		missing = append(missing, "FLANNEL_SUBNET")
	}
	if v6 && !e.Network6.IsValid() {
		missing = append(missing, "FLANNEL_IPV6_NETWORK")
	}
	if v6 && !e.Subnet6.IsValid() {
		missing = append(missing, "FLANNEL_IPV6_SUBNET")
	}
	if !e.haveMTU {
		missing = append(missing, "FLANNEL_MTU")
	}
	if !e.haveIPMasq {
		missing = append(missing, "FLANNEL_IPMASQ")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: missing %s", ErrSubnetEnv, strings.Join(missing, ", "))
	}
	for _, p := range [][2]netip.Prefix{{e.Network, e.Subnet}, {e.Network6, e.Subnet6}} {
		if p[0].IsValid() && (p[1].Bits() < p[0].Bits() || !p[0].Contains(p[1].Addr())) {
			return nil, fmt.Errorf("%w: subnet %v is not inside network %v", ErrSubnetEnv, p[1], p[0])
		}
	}
	return e, nil
}

// parsePrefix reads an address with its prefix length, of the family v6 asks for.
func parsePrefix(s string, v6 bool) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if p.Addr().Is4() == v6 || p.Addr().Is4In6() || p.Addr().Zone() != "" {
		fam := "IPv4"
		if v6 {
			fam = "IPv6"
		}
		return netip.Prefix{}, fmt.Errorf("%q is not an %s prefix", s, fam)
	}
	return p, nil
}

// delegateConf builds the config the delegate plugin (bridge unless set) is called
// with: the user's delegate object, the network's name and cniVersion, the MTU and
// masquerading from subnet.env unless the delegate sets them, isGateway for a bridge
// unless set, and host-local IPAM (unless ipam.type says otherwise) over the node's
// subnet with routes to the whole network. n and e are not changed.
func delegateConf(n *netConf, e *subnetEnv) (map[string]any, error) {
	d := make(map[string]any, len(n.Delegate)+8)
	for k, v := range n.Delegate {
		d[k] = v
	}
	d["name"] = n.Name
	if _, ok := d["type"]; !ok {
		d["type"] = "bridge"
	}
	if _, ok := d["ipMasq"]; !ok {
		// Masquerade in the bridge only when the daemon does not.
		d["ipMasq"] = !e.IPMasq
	}
	if _, ok := d["mtu"]; !ok {
		d["mtu"] = e.MTU
	}
	if d["type"] == "bridge" {
		if _, ok := d["isGateway"]; !ok {
			d["isGateway"] = true
		}
	}
	if n.CNIVersion != "" {
		d["cniVersion"] = n.CNIVersion
	}
	if n.RuntimeConfig != nil {
		d["runtimeConfig"] = n.RuntimeConfig
	}

	ipam := make(map[string]any, len(n.IPAM)+3)
	for k, v := range n.IPAM {
		ipam[k] = v
	}
	if _, ok := ipam["type"]; !ok {
		ipam["type"] = "host-local"
	}
	var ranges [][]map[string]any
	var routes []any
	if raw, ok := n.IPAM["routes"]; ok {
		rs, isList := raw.([]any)
		if !isList {
			return nil, fmt.Errorf("%w: ipam.routes must be a list, not %v", ErrNetConf, raw)
		}
		for i, r := range rs {
			obj, isObj := r.(map[string]any)
			dst, isString := obj["dst"].(string)
			if !isObj || !isString {
				return nil, fmt.Errorf("%w: ipam.routes[%d] must be an object with a dst", ErrNetConf, i)
			}
			if _, err := netip.ParsePrefix(dst); err != nil {
				return nil, fmt.Errorf("%w: ipam.routes[%d].dst: %w", ErrNetConf, i, err)
			}
			routes = append(routes, r)
		}
	}
	for _, f := range [][2]netip.Prefix{{e.Network, e.Subnet}, {e.Network6, e.Subnet6}} {
		if !f[1].IsValid() {
			continue
		}
		ranges = append(ranges, []map[string]any{{"subnet": f[1].Masked().String()}})
		routes = append(routes, map[string]any{"dst": f[0].Masked().String()})
	}
	ipam["ranges"] = ranges
	ipam["routes"] = routes
	d["ipam"] = ipam
	return d, nil
}
