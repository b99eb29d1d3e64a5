package lease

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
)

// State is weft's durable record (--lease-state-file): it outlives /run and the 24 h
// TTL, so a host that was away for long gets its old subnet back when it is free.
type State struct {
	HostID  string       `json:"HostID"`
	Network netip.Prefix `json:"Network,omitzero"`
	Subnet  netip.Prefix `json:"Subnet,omitzero"`
	// The IPv6 network and subnet of a dual-stack or IPv6-only lease.
	IPv6Network netip.Prefix `json:"IPv6Network,omitzero"`
	IPv6Subnet  netip.Prefix `json:"IPv6Subnet,omitzero"`
}

// LoadState reads the state file, making a new host identity when there is none.
// Without a state file (path "") there is no durable identity: HostID stays empty and
// leases carry none, as flanneld's do.
func LoadState(path string) (State, error) {
	var s State
	if path == "" {
		return s, nil
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return s, fmt.Errorf("lease state file: %w", err)
	default:
		if err := json.Unmarshal(data, &s); err != nil {
			return State{}, fmt.Errorf("lease state file %s: %w (remove it to start afresh)", path, err)
		}
	}
	if s.HostID == "" {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return s, err
		}
		s.HostID = hex.EncodeToString(b[:])
		if err := SaveState(path, s); err != nil {
			return s, err
		}
	}
	return s, nil
}

// SaveState writes s to the state file atomically; without one (path "") it does
// nothing.
func SaveState(path string, s State) error {
	if path == "" {
		return nil
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := writeAtomic(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("lease state file: %w", err)
	}
	return nil
}
