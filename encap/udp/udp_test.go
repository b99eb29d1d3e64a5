package udp

import (
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/proxy"
)

func TestParseUDPOptions(t *testing.T) {
	def := min(runtime.NumCPU(), maxUDPWorkers)
	off, long := time.Duration(0), 2*time.Second
	for _, c := range []struct {
		raw     string
		tuning  Tuning
		want    udpOptions
		errName string // option the error must name; "" for success
	}{
		{raw: ``, want: udpOptions{Port: 8285, MTU: 1472, Workers: def}},
		{raw: `null`, want: udpOptions{Port: 8285, MTU: 1472, Workers: def}},
		{raw: `{"Type":"udp"}`, want: udpOptions{Port: 8285, MTU: 1472, Workers: def}},
		{raw: `{"Type":"UDP"}`, want: udpOptions{Port: 8285, MTU: 1472, Workers: def}},
		{raw: `{"Type":"udp","Port":9000,"MTU":1400,"Workers":2}`, want: udpOptions{Port: 9000, MTU: 1400, Workers: 2}},
		{raw: `{"type":"udp","port":9001}`, want: udpOptions{Port: 9001, MTU: 1472, Workers: def}},
		{raw: `{"Type":"vxlan"}`, errName: "Type"},
		{raw: `{"Type":"udp","VNI":1}`, errName: "VNI"},
		{raw: `{"Port":"8285"}`, errName: "Port"},
		{raw: `{"Port":0}`, errName: "Port"},
		{raw: `{"Port":70000}`, errName: "Port"},
		{raw: `{"Port":8285,"port":8286}`, errName: "port"},
		{raw: `{"MTU":40}`, errName: "MTU"},
		{raw: `{"MTU":1.5}`, errName: "MTU"},
		{raw: `{"Workers":0}`, errName: "Workers"},
		{raw: `{"Workers":9}`, errName: "Workers"},
		{raw: `{"BusyPoll":"200us","Workers":1}`, want: udpOptions{Port: 8285, MTU: 1472, Workers: 1, BusyPoll: 200 * time.Microsecond}},
		{raw: `{"busypoll":"0s"}`, want: udpOptions{Port: 8285, MTU: 1472, Workers: def}},
		{raw: `{"BusyPoll":200}`, errName: "BusyPoll"},
		{raw: `{"BusyPoll":"soon"}`, errName: "BusyPoll"},
		{raw: `{"BusyPoll":"-1ms"}`, errName: "BusyPoll"},
		{raw: `{"BusyPoll":"2s"}`, errName: "BusyPoll"},
		{raw: `[1]`, errName: "Backend"},
		// The environment's tuning meets the same bounds as the config file.
		{raw: `{"BusyPoll":"200us"}`, tuning: Tuning{BusyPoll: &off}, want: udpOptions{Port: 8285, MTU: 1472, Workers: def}},
		{raw: `{}`, tuning: Tuning{BusyPoll: &long}, errName: "BusyPoll"},
		{raw: `{}`, tuning: Tuning{Tuning: proxy.Tuning{Batch: proxy.MaxBatch + 1}}, errName: "Batch"},
	} {
		got, pc, err := parseUDPOptions(json.RawMessage(c.raw), 1500, c.tuning)
		if c.errName == "" {
			if err != nil || got != c.want {
				t.Errorf("%s: got %+v, %v; want %+v", c.raw, got, err, c.want)
			}
			if pc.Port != got.Port || pc.MTU != got.MTU || pc.BusyPoll != got.BusyPoll || pc.Batch != c.tuning.Batch {
				t.Errorf("%s: proxy config %+v does not carry the options %+v", c.raw, pc, got)
			}
			continue
		}
		if !errors.Is(err, encap.ErrBadOption) || !strings.Contains(err.Error(), c.errName) {
			t.Errorf("%s: error %v, want encap.ErrBadOption naming %s", c.raw, err, c.errName)
		}
	}
}
