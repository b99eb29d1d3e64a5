// Package alloc holds the alloc backend: it leases a subnet and carries no traffic.
package alloc

import (
	"context"
	"encoding/json"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// backend only holds a lease: no data path.
type backend struct{ mtu int }

// New returns the "alloc" backend: it leases a subnet and carries no traffic. It
// has no options.
func New(cfg *lease.Config, ext encap.ExternalInterface) (encap.Backend, error) {
	if _, err := Check(cfg); err != nil {
		return nil, err
	}
	return &backend{mtu: ext.MTU}, nil
}

// Check says what New would do with cfg, and how that differs from flanneld: the
// alloc backend has no options, so any but Type is refused.
func Check(cfg *lease.Config) ([]encap.Note, error) {
	var none struct{}
	if err := encap.DecodeOptions("alloc", cfg.Backend, &none); err != nil {
		return nil, err
	}
	return []encap.Note{
		encap.Do("no data path: weftd leases a subnet and carries no traffic; FLANNEL_MTU is the interface's"),
		encap.Differs("lease-backend-type", `the lease says "BackendType":"alloc"; flanneld writes no type for alloc, as for udp`),
	}, nil
}

func (a *backend) Type() string                                         { return "alloc" }
func (a *backend) BackendData(context.Context) (json.RawMessage, error) { return nil, nil }
func (a *backend) Register(context.Context, lease.Lease) error          { return nil }
func (a *backend) MTU() int                                             { return a.mtu }
func (a *backend) HandleEvents(context.Context, []lease.Event)          {}
func (a *backend) Close() error                                         { return nil }
func (a *backend) Run(ctx context.Context) error                        { <-ctx.Done(); return nil }
