package encap

import (
	"bytes"
	"encoding/json"
	"strings"
)

// A Note is one thing a backend's Check says of a network config without building the
// backend: what the backend will do with it, or, with Diff set, a deliberate
// difference from flanneld that applies to it.
type Note struct {
	// Diff names the difference as docs/compatibility.md names it (an id of its
	// tables, such as "strict-options", or the words of its heading or list item);
	// empty for what weftd does with the config.
	Diff string
	Text string
}

// Do is a note of what weftd does with the config.
func Do(text string) Note { return Note{Text: text} }

// Differs is a note of a difference from flanneld, named as docs/compatibility.md
// names it.
func Differs(diff, text string) Note { return Note{Diff: diff, Text: text} }

// Given reports whether the Backend object raw sets the option name, matched as
// DecodeOptions matches keys (in any case; a null value sets nothing).
func Given(raw json.RawMessage, name string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	for k, v := range m {
		if strings.EqualFold(k, name) && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return true
		}
	}
	return false
}
