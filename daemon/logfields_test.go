package daemon

import (
	"net/netip"
	"reflect"
	"sort"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// TestLogFields: the lines about the external interface and the leases name only
// what the host has: no "invalid Prefix", "invalid IP" or year-1 expiry on IPv4-only,
// IPv6-only and Kubernetes hosts.
func TestLogFields(t *testing.T) {
	v4 := netip.MustParseAddr("192.0.2.10")
	v6 := netip.MustParseAddr("2001:db8::10")
	sn4 := netip.MustParsePrefix("198.18.11.0/24")
	sn6 := netip.MustParsePrefix("fd00:0:0:11::/64")
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		log  func(*zap.Logger)
		want map[string]any
	}{
		{name: "interface, IPv4-only",
			log: func(l *zap.Logger) {
				l.Info("x", extFields(encap.ExternalInterface{Name: "eth0", IfaceIP: v4, PublicIP: v4, MTU: 1500})...)
			},
			want: map[string]any{"iface": "eth0", "iface-ip": "192.0.2.10", "public-ip": "192.0.2.10", "mtu": int64(1500)}},
		{name: "interface, IPv6-only",
			log: func(l *zap.Logger) {
				l.Info("x", extFields(encap.ExternalInterface{Name: "eth0", PublicIP: netip.IPv4Unspecified(), IfaceIPv6: v6, PublicIPv6: v6, MTU: 1500})...)
			},
			want: map[string]any{"iface": "eth0", "iface-ipv6": "2001:db8::10", "public-ipv6": "2001:db8::10", "mtu": int64(1500)}},
		{name: "interface, dual stack",
			log: func(l *zap.Logger) {
				l.Info("x", extFields(encap.ExternalInterface{Name: "eth0", IfaceIP: v4, PublicIP: v4, IfaceIPv6: v6, PublicIPv6: v6, MTU: 9000})...)
			},
			want: map[string]any{"iface": "eth0", "iface-ip": "192.0.2.10", "public-ip": "192.0.2.10",
				"iface-ipv6": "2001:db8::10", "public-ipv6": "2001:db8::10", "mtu": int64(9000)}},
		{name: "our lease, etcd, IPv4-only",
			log:  func(l *zap.Logger) { l.Info("x", ownLeaseFields(lease.Lease{Subnet: sn4, Expiration: exp})...) },
			want: map[string]any{"subnet": "198.18.11.0/24", "key": "198.18.11.0-24", "expires": exp}},
		{name: "our lease, Kubernetes (no expiry)",
			log:  func(l *zap.Logger) { l.Info("x", ownLeaseFields(lease.Lease{Subnet: sn4})...) },
			want: map[string]any{"subnet": "198.18.11.0/24", "key": "198.18.11.0-24"}},
		{name: "our lease, dual stack",
			log: func(l *zap.Logger) {
				l.Info("x", ownLeaseFields(lease.Lease{Subnet: sn4, IPv6Subnet: sn6, Expiration: exp})...)
			},
			want: map[string]any{"subnet": "198.18.11.0/24", "ipv6-subnet": "fd00:0:0:11::/64", "key": "198.18.11.0-24&fd00:0:0:11::-64", "expires": exp}},
		{name: "peer, IPv4-only",
			log: func(l *zap.Logger) {
				l.Info("x", peerLeaseFields(lease.Lease{Subnet: sn4, Attrs: lease.Attrs{PublicIP: v4, BackendType: "vxlan"}})...)
			},
			want: map[string]any{"subnet": "198.18.11.0/24", "public-ip": "192.0.2.10", "backend": "vxlan"}},
		{name: "peer, IPv6-only",
			log: func(l *zap.Logger) {
				l.Info("x", peerLeaseFields(lease.Lease{IPv6Subnet: sn6, Attrs: lease.Attrs{PublicIP: netip.IPv4Unspecified(), PublicIPv6: v6, BackendType: "host-gw"}})...)
			},
			want: map[string]any{"ipv6-subnet": "fd00:0:0:11::/64", "public-ipv6": "2001:db8::10", "backend": "host-gw"}},
		{name: "peer, udp without a type",
			log: func(l *zap.Logger) {
				l.Info("x", peerLeaseFields(lease.Lease{Subnet: sn4, Attrs: lease.Attrs{PublicIP: v4}})...)
			},
			want: map[string]any{"subnet": "198.18.11.0/24", "public-ip": "192.0.2.10"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.InfoLevel)
			tt.log(zap.New(core))
			entries := logs.All()
			if len(entries) != 1 {
				t.Fatalf("%d entries", len(entries))
			}
			got := entries[0].ContextMap()
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("fields %v\nwant   %v", keys(got), keys(tt.want))
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
