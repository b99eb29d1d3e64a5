package lease

import (
	"context"
	"net/netip"
	"time"
)

// What weftd may ask of a Manager beyond its five methods. A source that cannot do a
// thing does not implement it, and weftd does without: each interface names the
// managers that implement it (lease/etcd's Manager, lease/kube's Manager), and they
// assert it at compile time.

// StatsReporter counts what the manager did since it started, for weftd's /metrics.
// Implemented by etcd.Manager and kube.Manager.
type StatsReporter interface {
	Stats() Stats
}

// Source says which manager filled a Stats, and so which of its fields count.
type Source int

const (
	SourceEtcd Source = iota + 1 // lease/etcd
	SourceKube                   // lease/kube
)

// Stats is a snapshot of a manager's counters. Resyncs and WatchErrors are kept by
// every source; the others by the Source their comment names (zero elsewhere).
type Stats struct {
	Source Source
	// Resyncs: lists of the other hosts' leases after the first one, after a watch was
	// interrupted (compaction, an outage, an expired watch, the API server restarted).
	Resyncs uint64
	// WatchErrors: lists and watches of the other hosts' leases that failed or were
	// interrupted.
	WatchErrors uint64

	Expiration    time.Time // etcd: when our lease runs out (zero before one is held, or a reservation)
	Renewals      uint64    // etcd: successful renewals of our lease
	RenewFailures uint64    // etcd: renewals that failed (retried)
	EtcdReachable bool      // etcd: false while ReachabilityMonitor sees the connection down

	NodeLists uint64 // kube: full lists of the Nodes, the first one included
}

// HealthReporter tells whether the lease is still held and the watch of the other
// hosts' leases is current; the error says why not (weftd's /readyz body).
// Implemented by etcd.Manager (etcd unreachable for longer than a reconnect) and
// kube.Manager (informer synced and heard from, our node still ours).
type HealthReporter interface {
	Health(now time.Time) error
}

// ReachabilityMonitor follows the manager's connection to its store until ctx ends,
// logging when it is lost and when it is back, and feeding HealthReporter and
// Stats.EtcdReachable. Implemented by etcd.Manager.
type ReachabilityMonitor interface {
	MonitorReachability(ctx context.Context)
}

// Republisher publishes new attributes in the lease the manager holds (PublicIP and
// PublicIPv6 after the external interface's address changed), and keeps them from
// then on. Implemented by etcd.Manager (the lease's value) and kube.Manager (our
// node's annotations).
type Republisher interface {
	Republish(attrs Attrs)
}

// CacheSyncer fills a cache before the manager can lease; WaitSynced returns once it
// is filled or ctx ends, so that the caller can bound that wait alone. Implemented by
// kube.Manager (the node informer).
type CacheSyncer interface {
	WaitSynced(ctx context.Context) error
}

// PublicAddressSource is a store that may set the addresses peers send to, in place
// of --public-ip and --public-ipv6; the zero Addr when it sets none. Implemented by
// kube.Manager (the node's node-public-ip and node-public-ipv6 annotations).
type PublicAddressSource interface {
	NodePublicIP(ctx context.Context) (netip.Addr, error)
	NodePublicIPv6(ctx context.Context) (netip.Addr, error)
}

// ReadyMarker tells the store that this host's network is up, once the data path
// runs. Implemented by kube.Manager (it clears the node's NetworkUnavailable
// condition).
type ReadyMarker interface {
	MarkNetworkReady(ctx context.Context) error
}

// NodeConditionSetter sets one condition on our node's status (Kubernetes mode), for
// `kubectl describe node` to show what weftd sees; other conditions are left as they
// are. Implemented by kube.Manager.
type NodeConditionSetter interface {
	SetNodeCondition(ctx context.Context, c NodeCondition) error
}

// NodeCondition is a condition weftd reports on its node.
type NodeCondition struct {
	Type    string // e.g. "WeftPeersReachable"
	OK      bool   // status True/False
	Reason  string // CamelCase, e.g. "PeersReachable", "PeersDown"
	Message string // short; e.g. "2 of 40 peers down: 198.18.3.0/24 encap-blocked UDP 8472"
}

// SiteSource says which site our host is in, for a manager that reads it from the
// cluster (Kubernetes mode: a node label); "" is none.
type SiteSource interface {
	Site(ctx context.Context) (string, error)
}
