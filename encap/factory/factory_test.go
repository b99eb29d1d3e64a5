package factory

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

func testConfig(backend string) *lease.Config {
	return &lease.Config{Network: netip.MustParsePrefix("198.18.0.0/16"), SubnetLen: 24,
		BackendType: "alloc", Backend: json.RawMessage(backend)}
}

func TestNewMatchesTypeInAnyCase(t *testing.T) {
	cfg := testConfig(`{"Type":"ALLOC"}`)
	cfg.BackendType = "ALLOC"
	be, err := New(cfg, encap.ExternalInterface{MTU: 1500}, Tuning{}, zap.NewNop())
	if err != nil || be.Type() != "alloc" {
		t.Fatalf("New with type ALLOC: %v, %v", be, err)
	}
	cfg.BackendType = "vxlan-gbp"
	if _, err := New(cfg, encap.ExternalInterface{MTU: 1500}, Tuning{}, zap.NewNop()); !errors.Is(err, encap.ErrUnknownBackend) {
		t.Fatalf("unknown type: error %v, want encap.ErrUnknownBackend", err)
	}
}

// TestRefusedBackends: ipip and ipsec are refused with why and what to use instead.
func TestRefusedBackends(t *testing.T) {
	for typ, words := range map[string][]string{
		"ipip":  {"ipip module", "vxlan", "host-gw"},
		"IPsec": {"charon", "WireGuard"},
	} {
		cfg := testConfig(`{"Type":"` + typ + `"}`)
		cfg.BackendType = typ
		_, err := New(cfg, encap.ExternalInterface{MTU: 1480}, Tuning{}, zap.NewNop())
		if !errors.Is(err, encap.ErrUnknownBackend) {
			t.Fatalf("%s: %v, want encap.ErrUnknownBackend", typ, err)
		}
		for _, w := range words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", typ, err, w)
			}
		}
	}
}
