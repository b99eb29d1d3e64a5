package encap

import (
	"context"
	"encoding/json"

	"github.com/weftnet/weft/lease"
)

// alloc is the backend that only holds a lease: no data path.
type alloc struct{ mtu int }

// NewAlloc returns the "alloc" backend: it leases a subnet and carries no traffic. It
// has no options.
func NewAlloc(cfg *lease.Config, ext ExternalInterface) (Backend, error) {
	var none struct{}
	if err := decodeOptions("alloc", cfg.Backend, &none); err != nil {
		return nil, err
	}
	return &alloc{mtu: ext.MTU}, nil
}

func (a *alloc) Type() string                                         { return "alloc" }
func (a *alloc) BackendData(context.Context) (json.RawMessage, error) { return nil, nil }
func (a *alloc) Register(context.Context, lease.Lease) error          { return nil }
func (a *alloc) MTU() int                                             { return a.mtu }
func (a *alloc) HandleEvents(context.Context, []lease.Event)          {}
func (a *alloc) Close() error                                         { return nil }
func (a *alloc) Run(ctx context.Context) error                        { <-ctx.Done(); return nil }
