package hostgw

import (
	"encoding/json"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// checkOptions refuses any option but Type: host-gw has none.
func checkOptions(raw json.RawMessage) error {
	var none struct{}
	return encap.DecodeOptions("host-gw", raw, &none)
}

// Check says what New would do with cfg without building the backend: New's option
// check (checkOptions), no netlink.
func Check(cfg *lease.Config) ([]encap.Note, error) {
	if err := checkOptions(cfg.Backend); err != nil {
		return nil, err
	}
	return []encap.Note{
		encap.Do("a route to each peer's subnet via its public address on the external interface (IPv6 subnets via its PublicIPv6); " +
			"peers must be on a directly connected network (others are reported, not routed); FLANNEL_MTU is the interface's"),
	}, nil
}
