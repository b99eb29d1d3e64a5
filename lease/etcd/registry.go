package etcd

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

var (
	// ErrNoConfig is returned while <prefix>/config does not exist.
	ErrNoConfig = errors.New("network config not found")
	// ErrTaken is returned by Create when the subnet is leased already.
	ErrTaken = errors.New("subnet already leased")
	// ErrNotFound is returned by Update when the lease is gone.
	ErrNotFound = errors.New("lease not found")
	// ErrGap is returned by Watch when events were missed (compaction, cleared index):
	// the caller must list again.
	ErrGap = errors.New("watch missed events")
)

// Listing is the set of leases at one point in the store's history.
type Listing struct {
	Leases []lease.Lease
	// Unreadable holds the leases whose key is valid but whose value is not: their
	// subnets are someone's, never free space.
	Unreadable []lease.Key
	// Rev is the store revision (v3) or index (v2) the listing was taken at.
	Rev int64
}

// Change is one change to a lease key seen by a watch. Lease.Attrs is zero for
// Removed; a change whose value cannot be decoded is reported with Bad set.
type Change struct {
	Type  lease.EventType
	Lease lease.Lease
	Bad   error
}

// Registry stores the network config and the leases (etcd v3 or v2, flannel's layout).
// A lease is named by its Key: IPv4, dual-stack and IPv6-only leases alike.
type Registry interface {
	Config(ctx context.Context) ([]byte, error)
	List(ctx context.Context) (Listing, error)
	Create(ctx context.Context, k lease.Key, a lease.Attrs, ttl time.Duration) (time.Time, error)
	// Update replaces the attrs of an existing lease and renews its TTL; a ttl of 0
	// keeps (or makes) the key TTL-less, a reservation, and returns the zero time.
	Update(ctx context.Context, k lease.Key, a lease.Attrs, ttl time.Duration) (time.Time, error)
	Delete(ctx context.Context, k lease.Key) error
	// Watch sends the changes after rev until ctx ends or an error; ErrGap means a
	// re-list is needed.
	Watch(ctx context.Context, rev int64, changes func([]Change)) error
	Close() error
}

// decodeLease is lease.DecodeAttrs for the value stored at key: weft's optional fields
// that could not be read are logged and left out, and the lease stands; the error
// returned means no lease.
func decodeLease(log *zap.Logger, key string, value []byte) (lease.Attrs, error) {
	a, err := lease.DecodeAttrs(value)
	if ign, ok := errors.AsType[*lease.IgnoredFieldsError](err); ok {
		log.Warn("lease value: leaving out what cannot be read", zap.String("key", key), zap.Strings("fields", ign.Fields))
		return a, nil
	}
	return a, err
}
