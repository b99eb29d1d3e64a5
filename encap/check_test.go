package encap

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestGiven(t *testing.T) {
	for _, c := range []struct {
		raw, name string
		want      bool
	}{
		{`{"Type":"udp","MTU":1400}`, "MTU", true},
		{`{"type":"udp","mtu":1400}`, "MTU", true},
		{`{"Type":"udp","MTU":null}`, "MTU", false},
		{`{"Type":"udp"}`, "MTU", false},
		{``, "MTU", false},
		{`[]`, "MTU", false},
	} {
		if got := Given(json.RawMessage(c.raw), c.name); got != c.want {
			t.Errorf("Given(%s, %s) = %t, want %t", c.raw, c.name, got, c.want)
		}
	}
}

// TestUnknownOption: an unknown key's error is ErrUnknownOption and ErrBadOption, with
// ErrBadOption's words; other bad options are not ErrUnknownOption.
func TestUnknownOption(t *testing.T) {
	var o struct{ Port int }
	err := DecodeOptions("udp", json.RawMessage(`{"Prot":1}`), &o)
	if !errors.Is(err, ErrUnknownOption) || !errors.Is(err, ErrBadOption) {
		t.Fatalf("%v: want ErrUnknownOption and ErrBadOption", err)
	}
	if want := `bad backend option: udp backend has no option "Prot" (its options: Port)`; err.Error() != want {
		t.Errorf("%q, want %q", err, want)
	}
	for _, raw := range []string{`{"Port":"x"}`, `{"Port":1,"port":2}`, `{"Type":"vxlan"}`} {
		if err := DecodeOptions("udp", json.RawMessage(raw), &o); !errors.Is(err, ErrBadOption) || errors.Is(err, ErrUnknownOption) {
			t.Errorf("%s: %v: want ErrBadOption alone", raw, err)
		}
	}
}
