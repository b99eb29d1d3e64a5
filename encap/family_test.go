package encap

import (
	"net/netip"
	"testing"

	"github.com/weftnet/weft/lease"
)

// TestPeerScope: which leases the kernel backends take, and under which key, for
// IPv4-only, dual-stack and IPv6-only networks.
func TestPeerScope(t *testing.T) {
	p := netip.MustParsePrefix
	v4only := &lease.Config{EnableIPv4: true, Network: p("198.18.0.0/16"), SubnetLen: 24}
	dual := &lease.Config{EnableIPv4: true, Network: p("198.18.0.0/16"), SubnetLen: 24,
		EnableIPv6: true, IPv6Network: p("fd00::/48"), IPv6SubnetLen: 64}
	v6only := &lease.Config{EnableIPv6: true, IPv6Network: p("fd00::/48"), IPv6SubnetLen: 64}
	dualLease := lease.Lease{Subnet: p("198.18.3.0/24"), IPv6Subnet: p("fd00:0:0:3::/64")}
	v6Lease := lease.Lease{IPv6Subnet: p("fd00:0:0:4::/64")}
	v6LeaseZeroV4 := lease.Lease{Subnet: p("0.0.0.0/0"), IPv6Subnet: p("fd00:0:0:5::/64")}
	outside := lease.Lease{Subnet: p("198.19.3.0/24"), IPv6Subnet: p("fd01:0:0:3::/64")}
	wrongLen := lease.Lease{Subnet: p("198.18.3.0/25"), IPv6Subnet: p("fd00:0:0:3::/80")}
	for _, c := range []struct {
		name string
		cfg  *lease.Config
		l    lease.Lease
		in   bool
		key  netip.Prefix
	}{
		{"v4 network, dual lease", v4only, dualLease, true, p("198.18.3.0/24")},
		{"v4 network, v6 lease", v4only, v6Lease, false, p("fd00:0:0:4::/64")},
		{"dual network, dual lease", dual, dualLease, true, p("198.18.3.0/24")},
		{"dual network, v6 lease", dual, v6Lease, true, p("fd00:0:0:4::/64")},
		{"v6 network, v6 lease", v6only, v6Lease, true, p("fd00:0:0:4::/64")},
		{"v6 network, 0.0.0.0/0 in the key", v6only, v6LeaseZeroV4, true, p("fd00:0:0:5::/64")},
		{"v6 network, dual lease", v6only, dualLease, true, p("198.18.3.0/24")},
		{"outside both networks", dual, outside, false, p("198.19.3.0/24")},
		{"wrong lengths", dual, wrongLen, false, p("198.18.3.0/25")},
	} {
		if in, key := InScope(c.cfg, c.l), PeerKey(c.l); in != c.in || key != c.key {
			t.Errorf("%s: in scope %v key %v, want %v %v", c.name, in, key, c.in, c.key)
		}
	}
}
