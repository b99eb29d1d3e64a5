package daemon

import (
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// logFields builds the fields of a log line from what a host has: an address,
// prefix or time that is absent (invalid, unspecified such as an IPv6-only lease's
// PublicIP 0.0.0.0, or zero, such as a Kubernetes lease's expiry) is left out, so an
// IPv4-only host's lines carry no "ipv6-subnet":"invalid Prefix".
type logFields []zap.Field

func (f logFields) addr(key string, a netip.Addr) logFields {
	if !a.IsValid() || a.IsUnspecified() {
		return f
	}
	return append(f, zap.Stringer(key, a))
}

func (f logFields) prefix(key string, p netip.Prefix) logFields {
	if !p.IsValid() {
		return f
	}
	return append(f, zap.Stringer(key, p))
}

func (f logFields) time(key string, t time.Time) logFields {
	if t.IsZero() {
		return f
	}
	return append(f, zap.Time(key, t))
}

func (f logFields) str(key, s string) logFields {
	if s == "" {
		return f
	}
	return append(f, zap.String(key, s))
}

// extFields are the fields of the external interface weftd uses.
func extFields(ext encap.ExternalInterface) []zap.Field {
	return logFields{zap.String("iface", ext.Name)}.
		addr("iface-ip", ext.IfaceIP).addr("public-ip", ext.PublicIP).
		addr("iface-ipv6", ext.IfaceIPv6).addr("public-ipv6", ext.PublicIPv6).
		append(zap.Int("mtu", ext.MTU))
}

// ownLeaseFields are the fields of our lease: subnets, key and expiry (none in
// Kubernetes mode, where a lease does not expire).
func ownLeaseFields(l lease.Lease) []zap.Field {
	return logFields{}.prefix("subnet", l.Subnet).prefix("ipv6-subnet", l.IPv6Subnet).
		append(zap.Stringer("key", l.Key())).time("expires", l.Expiration)
}

// peerLeaseFields are the fields of another host's lease in a lease event.
func peerLeaseFields(l lease.Lease) []zap.Field {
	return logFields{}.prefix("subnet", l.Subnet).prefix("ipv6-subnet", l.IPv6Subnet).
		addr("public-ip", l.Attrs.PublicIP).addr("public-ipv6", l.Attrs.PublicIPv6).
		str("backend", l.Attrs.BackendType)
}

func (f logFields) append(fs ...zap.Field) logFields { return append(f, fs...) }
