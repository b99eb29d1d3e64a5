package lease

import (
	"encoding/json"
	"net/netip"
)

// Config is the validated network configuration found at <prefix>/config.
type Config struct {
	Network   netip.Prefix
	SubnetLen int
	SubnetMin netip.Addr
	SubnetMax netip.Addr
	// BackendType is Backend.Type, "udp" when absent.
	BackendType string
	// Backend is the raw Backend object; each backend parses its own options from it.
	Backend json.RawMessage
	// EnableNFTables: masquerade and forward rules go into an nftables table of
	// weft's own instead of iptables chains (flannel's key of the same name).
	EnableNFTables bool
}
