package main

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/proxy"
)

func TestParseKnobs(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		check   func(o *options) bool
		wantErr string // the variable the error must name
	}{
		{name: "none set: the defaults", check: func(o *options) bool {
			u := o.tuning.UDP
			return u.Batch == 0 && u.SocketBuffer == 0 && u.BusyPoll == nil && !u.NoTUNOffload &&
				!u.NoGSO && !u.NoGRO && !u.NoMmsg && !u.NoReusePort
		}},
		{name: "all set", env: map[string]string{"WEFT_UDP_BATCH": "32", "WEFT_UDP_SOCKBUF": "-1",
			"WEFT_UDP_BUSY_POLL": "200us", "WEFT_UDP_NO_REUSEPORT": "true", "WEFT_UDP_NO_MMSG": "1",
			"WEFT_UDP_NO_GSO": "true", "WEFT_UDP_NO_GRO": "t", "WEFT_TUN_OFFLOAD": "0"},
			check: func(o *options) bool {
				u := o.tuning.UDP
				return u.Batch == 32 && u.SocketBuffer == -1 && u.BusyPoll != nil && *u.BusyPoll == 200*time.Microsecond &&
					u.NoReusePort && u.NoMmsg && u.NoGSO && u.NoGRO && u.NoTUNOffload
			}},
		{name: "busy poll 0 turns the config's off", env: map[string]string{"WEFT_UDP_BUSY_POLL": "0"},
			check: func(o *options) bool { return o.tuning.UDP.BusyPoll != nil && *o.tuning.UDP.BusyPoll == 0 }},
		{name: "busy poll at the bound", env: map[string]string{"WEFT_UDP_BUSY_POLL": "1s"},
			check: func(o *options) bool { return *o.tuning.UDP.BusyPoll == proxy.MaxBusyPoll }},
		{name: "busy poll past the bound", env: map[string]string{"WEFT_UDP_BUSY_POLL": "1.5s"}, wantErr: "WEFT_UDP_BUSY_POLL"},
		{name: "negative busy poll", env: map[string]string{"WEFT_UDP_BUSY_POLL": "-1ms"}, wantErr: "WEFT_UDP_BUSY_POLL"},
		{name: "busy poll not a duration", env: map[string]string{"WEFT_UDP_BUSY_POLL": "200"}, wantErr: "WEFT_UDP_BUSY_POLL"},
		{name: "batch past the bound", env: map[string]string{"WEFT_UDP_BATCH": "1025"}, wantErr: "WEFT_UDP_BATCH"},
		{name: "negative batch", env: map[string]string{"WEFT_UDP_BATCH": "-1"}, wantErr: "WEFT_UDP_BATCH"},
		{name: "batch not a number", env: map[string]string{"WEFT_UDP_BATCH": "many"}, wantErr: "WEFT_UDP_BATCH"},
		{name: "sockbuf not a number", env: map[string]string{"WEFT_UDP_SOCKBUF": "8M"}, wantErr: "WEFT_UDP_SOCKBUF"},
		{name: "bool not a bool", env: map[string]string{"WEFT_UDP_NO_GSO": "yes"}, wantErr: "WEFT_UDP_NO_GSO"},
		{name: "offload not a bool", env: map[string]string{"WEFT_TUN_OFFLOAD": "off"}, wantErr: "WEFT_TUN_OFFLOAD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(nil, func(k string) string { return tt.env[k] }, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil || !tt.check(o) {
				t.Fatalf("options %+v, %v", o, err)
			}
		})
	}
}

// TestParseKnobsBoundIsProxys: the bound weftd applies to WEFT_UDP_BUSY_POLL is the
// data path's own, reported as a proxy config error.
func TestParseKnobsBoundIsProxys(t *testing.T) {
	_, err := parseKnobs(func(k string) string {
		if k == "WEFT_UDP_BUSY_POLL" {
			return (proxy.MaxBusyPoll + time.Nanosecond).String()
		}
		return ""
	})
	if !errors.Is(err, proxy.ErrConfig) {
		t.Fatalf("error %v, want proxy.ErrConfig", err)
	}
}

// TestKnobsDocumented: the table of WEFT_* variables in docs/operations.md is exactly knobs.
func TestKnobsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, k := range knobs {
		want.WriteString("| `" + k.name + "` | " + k.meaning + " | " + k.def + " |\n")
	}
	head := "| variable | meaning | default |\n|----------|---------|---------|\n"
	if !strings.Contains(string(readme), head+want.String()+"\n") {
		t.Fatalf("docs/operations.md lacks this table of the WEFT_* variables (after its header):\n%s", want.String())
	}
}
