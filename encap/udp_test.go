package encap

import (
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
)

func TestParseUDPOptions(t *testing.T) {
	def := min(runtime.NumCPU(), maxUDPWorkers)
	for _, c := range []struct {
		raw     string
		want    udpOptions
		errName string // option the error must name; "" for success
	}{
		{``, udpOptions{8285, 1472, def}, ""},
		{`null`, udpOptions{8285, 1472, def}, ""},
		{`{"Type":"udp"}`, udpOptions{8285, 1472, def}, ""},
		{`{"Type":"udp","Port":9000,"MTU":1400,"Workers":2}`, udpOptions{9000, 1400, 2}, ""},
		{`{"type":"udp","port":9001}`, udpOptions{9001, 1472, def}, ""},
		{`{"Type":"vxlan"}`, udpOptions{}, "Type"},
		{`{"Type":"udp","VNI":1}`, udpOptions{}, "VNI"},
		{`{"Port":"8285"}`, udpOptions{}, "Port"},
		{`{"Port":0}`, udpOptions{}, "Port"},
		{`{"Port":70000}`, udpOptions{}, "Port"},
		{`{"MTU":40}`, udpOptions{}, "MTU"},
		{`{"MTU":1.5}`, udpOptions{}, "MTU"},
		{`{"Workers":0}`, udpOptions{}, "Workers"},
		{`{"Workers":9}`, udpOptions{}, "Workers"},
		{`[1]`, udpOptions{}, "Backend"},
	} {
		got, err := parseUDPOptions(json.RawMessage(c.raw), 1500)
		if c.errName == "" {
			if err != nil || got != c.want {
				t.Errorf("%s: got %+v, %v; want %+v", c.raw, got, err, c.want)
			}
			continue
		}
		if !errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), c.errName) {
			t.Errorf("%s: error %v, want ErrBadOption naming %s", c.raw, err, c.errName)
		}
	}
}
