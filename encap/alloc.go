package encap

import (
	"context"
	"encoding/json"

	"github.com/weftnet/weft/lease"
)

// alloc is the backend that only holds a lease: no data path.
type alloc struct{ mtu int }

// NewAlloc returns the "alloc" backend: it leases a subnet and carries no traffic.
func NewAlloc(ext ExternalInterface) Backend { return &alloc{mtu: ext.MTU} }

func (a *alloc) Type() string                                         { return "alloc" }
func (a *alloc) BackendData(context.Context) (json.RawMessage, error) { return nil, nil }
func (a *alloc) Register(context.Context, lease.Lease) error          { return nil }
func (a *alloc) MTU() int                                             { return a.mtu }
func (a *alloc) HandleEvents(context.Context, []lease.Event)          {}
func (a *alloc) Close() error                                         { return nil }
func (a *alloc) Run(ctx context.Context) error                        { <-ctx.Done(); return nil }
