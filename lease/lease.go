// Package lease holds what weft's two sources of leases share: the network
// configuration (config*.go), the subnet leases and their events (lease.go), their
// encoding in etcd in flannel's layout (codec.go), the Manager interface weftd uses
// (lease.go) and the capabilities it may ask of a manager beyond it
// (capabilities.go), subnet.env (subnetenv.go) and the durable state file (state.go).
// The managers themselves live beside it: lease/etcd over etcd's v3 or v2 API,
// lease/kube over Kubernetes nodes.
package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"time"
)

// DefaultPrefix is flannel's etcd prefix.
const DefaultPrefix = "/coreos.com/network"

// DefaultTTL is the lifetime of a lease, as in flannel.
const DefaultTTL = 24 * time.Hour

// Attrs is the JSON value stored under a subnet key. Field names match flanneld's so a
// cluster can mix both daemons; flanneld ignores HostID.
type Attrs struct {
	PublicIP netip.Addr `json:"PublicIP"`
	// PublicIPv6 is the host's IPv6 address on a dual-stack or IPv6-only network; zero
	// when it has none (null in the JSON, as flanneld writes it).
	PublicIPv6  netip.Addr      `json:"PublicIPv6"`
	BackendType string          `json:"BackendType,omitempty"`
	BackendData json.RawMessage `json:"BackendData,omitempty"`
	// BackendV6Data is the backend's data for the IPv6 overlay (flanneld's vxlan puts
	// the v6 device's VtepMAC there).
	BackendV6Data json.RawMessage `json:"BackendV6Data,omitempty"`
	// HostID is a stable identity of the host (weft's addition): two hosts presenting
	// the same PublicIP must not silently share one subnet.
	HostID string `json:"WeftHostID,omitempty"`
	// Site is the host's site (weft's addition, --site): hosts of one site reach each
	// other on SiteIP, the address of their interface, whatever PublicIP says. A site
	// never means NAT by itself. NAT says the host is not to be dialed at its PublicIP
	// from outside its site (--behind-nat: its address is known dead from outside).
	// Outside is where a host that can see it sees its WireGuard socket (its NAT's
	// outside address and port), published only when it differs from PublicIP and
	// the port: peers behind NAT dial it there together (punching). All are absent
	// without a site; flanneld ignores them.
	Site    string         `json:"WeftSite,omitempty"`
	SiteIP  netip.Addr     `json:"WeftSiteIP,omitzero"`
	NAT     bool           `json:"WeftNAT,omitempty"`
	Outside netip.AddrPort `json:"WeftOutside,omitzero"`
}

// Equal reports whether a and b publish the same thing: every field alike, BackendData
// compared without surrounding white space.
func (a Attrs) Equal(b Attrs) bool {
	return a.PublicIP == b.PublicIP && a.PublicIPv6 == b.PublicIPv6 && a.BackendType == b.BackendType &&
		a.HostID == b.HostID && a.Site == b.Site && a.SiteIP == b.SiteIP && a.NAT == b.NAT && a.Outside == b.Outside &&
		bytes.Equal(bytes.TrimSpace(a.BackendData), bytes.TrimSpace(b.BackendData)) &&
		bytes.Equal(bytes.TrimSpace(a.BackendV6Data), bytes.TrimSpace(b.BackendV6Data))
}

// Lease is one host's claim on a subnet. Subnet is the IPv4 subnet, zero on an
// IPv6-only lease; IPv6Subnet the IPv6 one of a dual-stack (or IPv6-only) lease, zero
// when absent. A lease is named by both (Key).
type Lease struct {
	Subnet     netip.Prefix
	IPv6Subnet netip.Prefix
	Attrs      Attrs
	Expiration time.Time
	// Reserved: the key has no TTL, a reservation (flannel's Documentation/
	// reservations.md). It is used by the host whose PublicIP it names, never given a
	// TTL and never renewed (deleted only when it no longer fits the network config,
	// as flanneld does); Expiration is zero.
	Reserved bool
}

// Key names a lease: its IPv4 subnet, its IPv6 subnet, or both (dual stack); the
// absent one is the zero prefix. Its String is the lease's name under
// <prefix>/subnets/ in flanneld's layout (LeaseKey), so one Key is one etcd key.
type Key struct {
	Subnet     netip.Prefix
	IPv6Subnet netip.Prefix
}

// String is the key's name under <prefix>/subnets/.
func (k Key) String() string { return LeaseKey(k.Subnet, k.IPv6Subnet) }

// IsValid reports whether k names at least one subnet.
func (k Key) IsValid() bool { return k.Subnet.IsValid() || k.IPv6Subnet.IsValid() }

// Key is the name of l.
func (l Lease) Key() Key { return Key{Subnet: l.Subnet, IPv6Subnet: l.IPv6Subnet} }

// EventType says what happened to a lease.
type EventType int

const (
	Added EventType = iota + 1
	Removed
)

func (t EventType) String() string {
	switch t {
	case Added:
		return "added"
	case Removed:
		return "removed"
	}
	return "unknown"
}

// Event is a change to one lease. An Added event for a subnet that is already known
// replaces its attributes.
type Event struct {
	Type  EventType
	Lease Lease
}

// Manager is what weftd needs from a source of leases (etcd or Kubernetes).
type Manager interface {
	// Config returns the network configuration, waiting (with a log line) until it
	// exists or ctx ends.
	Config(ctx context.Context) (*Config, error)
	// Acquire leases a subnet for attrs, in the order docs/design.md gives, and records it
	// in the durable state file. The caller writes subnet.env (WriteSubnetEnv), since
	// FLANNEL_MTU comes from the backend.
	Acquire(ctx context.Context, attrs Attrs) (Lease, error)
	// Hold keeps own alive until ctx ends: renews it before expiry, re-acquires it when
	// it is deleted (preferring the same subnet) and calls changed with the new lease
	// when it differs. It returns ctx's error.
	Hold(ctx context.Context, own Lease, changed func(Lease)) error
	// Watch sends the leases of the other hosts (never our own lease): first one batch
	// of Added events for the current leases (possibly empty), then changes. After any
	// gap it re-lists and sends exactly the difference. It never reports an error as an
	// empty snapshot and keeps the last known leases while the store is unreachable.
	// It returns ctx's error.
	Watch(ctx context.Context, own Key, events chan<- []Event) error
	// Close releases what the manager holds (its store's connection, informers) once
	// every other call has returned.
	Close() error
}

// CompatibleWith reports whether a peer's lease can be reached by a backend of type
// backendType. flanneld's udp leases carry no BackendType, so an empty type counts as
// udp.
func CompatibleWith(backendType string, l Lease) bool {
	t := l.Attrs.BackendType
	if t == "" {
		t = "udp"
	}
	return t == backendType
}
