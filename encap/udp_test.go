package encap

import (
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestParseUDPOptions(t *testing.T) {
	def := min(runtime.NumCPU(), maxUDPWorkers)
	for _, c := range []struct {
		raw     string
		want    udpOptions
		errName string // option the error must name; "" for success
	}{
		{``, udpOptions{Port: 8285, MTU: 1472, Workers: def}, ""},
		{`null`, udpOptions{Port: 8285, MTU: 1472, Workers: def}, ""},
		{`{"Type":"udp"}`, udpOptions{Port: 8285, MTU: 1472, Workers: def}, ""},
		{`{"Type":"udp","Port":9000,"MTU":1400,"Workers":2}`, udpOptions{Port: 9000, MTU: 1400, Workers: 2}, ""},
		{`{"type":"udp","port":9001}`, udpOptions{Port: 9001, MTU: 1472, Workers: def}, ""},
		{`{"Type":"vxlan"}`, udpOptions{}, "Type"},
		{`{"Type":"udp","VNI":1}`, udpOptions{}, "VNI"},
		{`{"Port":"8285"}`, udpOptions{}, "Port"},
		{`{"Port":0}`, udpOptions{}, "Port"},
		{`{"Port":70000}`, udpOptions{}, "Port"},
		{`{"MTU":40}`, udpOptions{}, "MTU"},
		{`{"MTU":1.5}`, udpOptions{}, "MTU"},
		{`{"Workers":0}`, udpOptions{}, "Workers"},
		{`{"Workers":9}`, udpOptions{}, "Workers"},
		{`{"BusyPoll":"200us","Workers":1}`, udpOptions{Port: 8285, MTU: 1472, Workers: 1, BusyPoll: 200 * time.Microsecond}, ""},
		{`{"busypoll":"0s"}`, udpOptions{Port: 8285, MTU: 1472, Workers: def}, ""},
		{`{"BusyPoll":200}`, udpOptions{}, "BusyPoll"},
		{`{"BusyPoll":"soon"}`, udpOptions{}, "BusyPoll"},
		{`{"BusyPoll":"-1ms"}`, udpOptions{}, "BusyPoll"},
		{`{"BusyPoll":"2s"}`, udpOptions{}, "BusyPoll"},
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
