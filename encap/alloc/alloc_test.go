package alloc

import (
	"encoding/json"
	"errors"
	"net/netip"
	"testing"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// TestBackendOptionsAgree runs one config through every backend's constructor that
// needs no kernel: all use the same decoder, so case and strictness agree.
func TestBackendOptionsAgree(t *testing.T) {
	for _, raw := range []string{`{"type":"alloc"}`, `{"TYPE":"Alloc"}`} {
		if _, err := New(testConfig(raw), encap.ExternalInterface{MTU: 1500}); err != nil {
			t.Errorf("%s: %v", raw, err)
		}
	}
	for _, raw := range []string{`{"Type":"alloc","Port":1}`, `{"type":"alloc","mtu":1400}`} {
		if _, err := New(testConfig(raw), encap.ExternalInterface{MTU: 1500}); !errors.Is(err, encap.ErrBadOption) {
			t.Errorf("%s: error %v, want encap.ErrBadOption", raw, err)
		}
	}
}

func testConfig(backend string) *lease.Config {
	return &lease.Config{Network: netip.MustParsePrefix("198.18.0.0/16"), SubnetLen: 24,
		BackendType: "alloc", Backend: json.RawMessage(backend)}
}
