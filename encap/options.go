package encap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"
)

var durationType = reflect.TypeFor[time.Duration]()

// ErrUnknownOption is DecodeOptions' error for a key the backend does not have: it
// wraps ErrBadOption, with the same words. flanneld ignores such a key; weftd refuses
// it (docs/compatibility.md, strict-options), and `weftd check-config` says so.
var ErrUnknownOption = fmt.Errorf("%w", ErrBadOption)

// DecodeOptions decodes the network config's Backend object into dst, a pointer to a
// struct whose exported fields are the options of backend typ; the values already in
// dst are the defaults. It is strict where encoding/json is lenient and lenient where
// flanneld (which uses encoding/json) is:
//
//   - keys match field names case-insensitively, so {"type":"vxlan","vni":2} decodes
//     as flanneld decodes it;
//   - an unknown key, a key given twice (in any case) and a value of the wrong type
//     are errors naming the key (an unknown key's wraps ErrUnknownOption too);
//   - "Type" is always accepted and must name typ (in any case);
//   - a time.Duration field takes a duration string such as "200us";
//   - null leaves an option at its default, as encoding/json does.
//
// Every error wraps ErrBadOption. An empty or null Backend leaves dst as it is.
func DecodeOptions(typ string, raw json.RawMessage, dst any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return fmt.Errorf("%w: %s backend: Backend is not a JSON object: %s", ErrBadOption, typ, abbrev(raw))
	}
	v := reflect.ValueOf(dst).Elem()
	fields := map[string]int{} // lower-case name -> field index
	var names []string
	for i := range v.NumField() {
		if f := v.Type().Field(i); f.IsExported() {
			fields[strings.ToLower(f.Name)] = i
			names = append(names, f.Name)
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad key in a stable order
	seen := map[string]string{}
	for _, k := range keys {
		lk := strings.ToLower(k)
		if prev, dup := seen[lk]; dup {
			return fmt.Errorf("%w: %s backend: option %q given twice (as %q and %q)", ErrBadOption, typ, k, prev, k)
		}
		seen[lk] = k
		if lk == "type" {
			// null is no type, as lease.ParseConfig reads it.
			var t *string
			if err := json.Unmarshal(m[k], &t); err != nil || t != nil && !strings.EqualFold(*t, typ) {
				return fmt.Errorf("%w: %s backend: %s %s is not %q", ErrBadOption, typ, k, abbrev(m[k]), typ)
			}
			continue
		}
		i, ok := fields[lk]
		if !ok {
			known := "none"
			if len(names) > 0 {
				known = strings.Join(names, ", ")
			}
			return fmt.Errorf("%w: %s backend has no option %q (its options: %s)", ErrUnknownOption, typ, k, known)
		}
		f := v.Field(i)
		name := v.Type().Field(i).Name
		if err := decodeField(f, m[k]); err != nil {
			return fmt.Errorf("%w: %s backend: %s: %s is not %s", ErrBadOption, typ, name, abbrev(m[k]), err)
		}
	}
	return nil
}

// decodeField decodes one option value into f; its error is what the value should be.
func decodeField(f reflect.Value, raw json.RawMessage) error {
	if bytes.Equal(raw, []byte("null")) {
		return nil // the default stays, as encoding/json (and so flanneld) does
	}
	if f.Type() == durationType {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return errWant("a duration string such as \"200us\"")
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return errWant("a duration string such as \"200us\"")
		}
		f.SetInt(int64(d))
		return nil
	}
	if json.Unmarshal(raw, f.Addr().Interface()) != nil {
		return errWant(kindName(f.Kind()))
	}
	return nil
}

type errWant string

func (e errWant) Error() string { return string(e) }

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Bool:
		return "a boolean"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	}
	return "a " + k.String()
}

// abbrev quotes a JSON value for an error message, cut short when long.
func abbrev(raw json.RawMessage) string {
	const limit = 40
	if len(raw) > limit {
		return string(raw[:limit]) + "…"
	}
	return string(raw)
}
