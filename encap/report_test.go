package encap

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestReportStatsJSON pins the JSON weftd's /stats serves for a backend without Stats
// of its own (vxlan, host-gw), and that one with Stats serves them as they are: a
// change of shape breaks the scripts that read it. The backends with Stats of their
// own (udp, wireguard) pin theirs in their packages' tests.
func TestReportStatsJSON(t *testing.T) {
	for _, c := range []struct {
		name string
		r    Report
		want string
	}{
		{"vxlan or host-gw", Report{Peers: 2, Repairs: map[string]uint64{"route": 1},
			Counters: map[string]uint64{"full_reconciles": 4, "applies": 9, "netlink_lists": 12}},
			`{"applies":9,"full_reconciles":4,"netlink_lists":12,"peers":2}`},
		{"vxlan or host-gw, nothing counted yet", Report{Repairs: map[string]uint64{}, Counters: map[string]uint64{}},
			`{"peers":0}`},
		{"a backend's own", Report{Peers: 2, Counters: map[string]uint64{"applies": 1},
			Stats: map[string]any{"peers": 2, "devices": map[string]string{}}},
			`{"devices":{},"peers":2}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			// As /stats writes it: an Encoder, one line.
			var b bytes.Buffer
			if err := json.NewEncoder(&b).Encode(c.r); err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != c.want+"\n" {
				t.Fatalf("/stats of %s:\n got %s\nwant %s", c.name, got, c.want)
			}
		})
	}
}
