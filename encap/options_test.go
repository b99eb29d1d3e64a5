package encap

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

type testOptions struct {
	VNI           int
	Port          int
	DirectRouting bool
	Name          string
	Wait          time.Duration
	internal      int
}

func TestDecodeOptions(t *testing.T) {
	def := testOptions{VNI: 1, Port: 8472, internal: 7}
	for _, c := range []struct {
		name    string
		raw     string
		want    testOptions
		errName string // what the error must name; "" for success
	}{
		{name: "empty", raw: ``, want: def},
		{name: "null", raw: `null`, want: def},
		{name: "only type", raw: `{"Type":"vxlan"}`, want: def},
		{name: "flanneld's lower case", raw: `{"type":"vxlan","vni":2}`, want: testOptions{VNI: 2, Port: 8472, internal: 7}},
		{name: "any case", raw: `{"TYPE":"VXLAN","pOrT":4789,"directrouting":true}`,
			want: testOptions{VNI: 1, Port: 4789, DirectRouting: true, internal: 7}},
		{name: "string and duration", raw: `{"Name":"x","Wait":"1.5s"}`,
			want: testOptions{VNI: 1, Port: 8472, Name: "x", Wait: 1500 * time.Millisecond, internal: 7}},
		{name: "null keeps the default", raw: `{"VNI":null,"Wait":null,"Type":null}`, want: def},
		{name: "whitespace", raw: " \n{ \"VNI\" : 3 }\t", want: testOptions{VNI: 3, Port: 8472, internal: 7}},
		{name: "unknown key", raw: `{"Type":"vxlan","GBP":true}`, errName: `"GBP"`},
		{name: "unexported field is no option", raw: `{"internal":1}`, errName: `"internal"`},
		{name: "other type", raw: `{"Type":"udp"}`, errName: "Type"},
		{name: "type not a string", raw: `{"Type":1}`, errName: "Type"},
		{name: "string for int", raw: `{"VNI":"2"}`, errName: "VNI"},
		{name: "float for int", raw: `{"vni":2.5}`, errName: "VNI"},
		{name: "int overflow", raw: `{"VNI":99999999999999999999}`, errName: "VNI"},
		{name: "string for bool", raw: `{"DirectRouting":"true"}`, errName: "DirectRouting"},
		{name: "int for string", raw: `{"Name":1}`, errName: "Name"},
		{name: "number for duration", raw: `{"Wait":100}`, errName: "Wait"},
		{name: "bad duration", raw: `{"Wait":"soon"}`, errName: "Wait"},
		{name: "twice in two cases", raw: `{"VNI":1,"vni":2}`, errName: "twice"},
		{name: "array", raw: `[1]`, errName: "not a JSON object"},
		{name: "string", raw: `"vxlan"`, errName: "not a JSON object"},
		{name: "broken", raw: `{"VNI":`, errName: "not a JSON object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := def
			err := DecodeOptions("vxlan", json.RawMessage(c.raw), &got)
			if c.errName == "" {
				if err != nil || got != c.want {
					t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
				}
				return
			}
			if !errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), c.errName) || !strings.Contains(err.Error(), "vxlan") {
				t.Fatalf("error %v, want ErrBadOption naming vxlan and %s", err, c.errName)
			}
		})
	}
}

// FuzzDecodeOptions: any Backend object gives options or an ErrBadOption, never a
// panic; what decodes, decodes again to the same options from its canonical form.
func FuzzDecodeOptions(f *testing.F) {
	for _, s := range []string{``, `null`, `{"type":"vxlan","vni":2}`, `{"Wait":"1ms","Name":"n"}`,
		`{"VNI":1,"vni":2}`, `[1]`, `{"DirectRouting":true,"Port":65535}`, `{"Type":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var got testOptions
		err := DecodeOptions("vxlan", raw, &got)
		if err != nil {
			if !errors.Is(err, ErrBadOption) {
				t.Fatalf("error %v does not wrap ErrBadOption", err)
			}
			return
		}
		canon, err := json.Marshal(map[string]any{"VNI": got.VNI, "Port": got.Port,
			"DirectRouting": got.DirectRouting, "Name": got.Name, "Wait": got.Wait.String()})
		if err != nil {
			t.Fatal(err)
		}
		var again testOptions
		if err := DecodeOptions("vxlan", canon, &again); err != nil || again != got {
			t.Fatalf("%s decoded to %+v; its canonical form %s to %+v, %v", raw, got, canon, again, err)
		}
	})
}
