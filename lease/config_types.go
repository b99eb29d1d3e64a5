package lease

import (
	"encoding/json"
	"net/netip"
)

// Config is the validated network configuration found at <prefix>/config.
type Config struct {
	// EnableIPv4 is true unless the config says "EnableIPv4": false (IPv6 only); the
	// four IPv4 fields below are zero then.
	EnableIPv4 bool
	// EnableIPv6 adds an IPv6 network: the four IPv6 fields are set only when it is true.
	EnableIPv6 bool

	Network   netip.Prefix
	SubnetLen int
	SubnetMin netip.Addr
	SubnetMax netip.Addr

	IPv6Network   netip.Prefix
	IPv6SubnetLen int
	IPv6SubnetMin netip.Addr
	IPv6SubnetMax netip.Addr

	// BackendType is Backend.Type, "udp" when absent.
	BackendType string
	// Backend is the raw Backend object; each backend parses its own options from it.
	Backend json.RawMessage
	// EnableNFTables: masquerade and forward rules go into an nftables table of
	// weft's own instead of iptables chains (flannel's key of the same name).
	EnableNFTables bool
}
