//go:build !linux

package firewall

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
)

var errNoNFTables = errors.New("nftables is Linux only")

// NFTables is Linux only; elsewhere NewNFTables fails.
type NFTables struct{}

// NewNFTables fails off Linux.
func NewNFTables(Options) (*NFTables, error) {
	return nil, fmt.Errorf("nftables: %w", errNoNFTables)
}

func (*NFTables) Name() string { return "nftables" }

func (*NFTables) Backend() string { return "nftables" }

func (*NFTables) SetMasq(context.Context, netip.Prefix, netip.Prefix) error { return errNoNFTables }

func (*NFTables) SetForward(context.Context, netip.Prefix) error { return errNoNFTables }

func (*NFTables) Repair(context.Context) (bool, error) { return false, errNoNFTables }

func (*NFTables) Remove(context.Context) error { return nil }

// NewNFTables6 fails off Linux.
func NewNFTables6(o Options) (*NFTables, error) { return NewNFTables(o) }

func removeNFTTables(context.Context, []nftTable) ([]nftTable, error) { return nil, nil }
