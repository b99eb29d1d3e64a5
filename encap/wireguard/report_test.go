package wireguard

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/transport/wgbind"
)

// TestReportStatsJSON pins the JSON weftd's /stats serves for the wireguard backend:
// a change of shape breaks the scripts that read it.
func TestReportStatsJSON(t *testing.T) {
	for _, c := range []struct {
		name string
		r    encap.Report
		want string
	}{
		{"devices", encap.Report{Peers: 1, Repairs: map[string]uint64{"device": 1}, Stats: &stats{Peers: 1,
			Devices: map[string]string{"flannel-wg": "userspace", "flannel-wg-v6": "kernel"},
			Drops:   map[string]map[string]uint64{"flannel-wg": {"invalid_mac1": 3, "unknown_type": 0}}}},
			`{"devices":{"flannel-wg":"userspace","flannel-wg-v6":"kernel"},"drops":{"flannel-wg":{"invalid_mac1":3,"unknown_type":0}},"peers":1}`},
		{"initiations", encap.Report{Stats: &stats{Devices: map[string]string{"flannel-wg": "userspace"},
			Drops:       map[string]map[string]uint64{},
			Initiations: map[string]wgbind.InitiationCounts{"flannel-wg": {Retransmitted: 4, Resent: 1, NotKept: 2}}}},
			`{"devices":{"flannel-wg":"userspace"},"drops":{},"initiations":{"flannel-wg":{"retransmitted":4,"resent":1,"not_kept":2}},"peers":0}`},
		{"no device yet", encap.Report{Stats: &stats{Devices: map[string]string{},
			Drops: map[string]map[string]uint64{}}},
			`{"devices":{},"drops":{},"peers":0}`},
		{"a relay", encap.Report{Stats: &stats{Peers: 2, Devices: map[string]string{}, Drops: map[string]map[string]uint64{},
			RelayedPackets: 3, RelayedBytes: 300}},
			`{"devices":{},"drops":{},"peers":2,"relayed":{"bytes":300,"packets":3}}`},
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

// TestReportMetrics: the wireguard backend's metrics pass promlint and say what its
// report says.
func TestReportMetrics(t *testing.T) {
	s := &stats{Devices: map[string]string{Device: Userspace}, Drops: map[string]map[string]uint64{Device: {"invalid_mac1": 2}},
		Punched: 1, Relayed: 2, PathChanges: 3,
		Initiations: map[string]wgbind.InitiationCounts{Device: {Retransmitted: 5, NotKept: 7}}}
	problems, err := testutil.CollectAndLint(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP weft_peer_ways Peers outside our site by the way we reach them: punched (answering through NAT, both hosts dialing) or relayed.
# TYPE weft_peer_ways gauge
weft_peer_ways{way="punched"} 1
weft_peer_ways{way="relayed"} 2
# HELP weft_wireguard_device_info Always 1 for each device of the wireguard backend; implementation says what runs it: kernel (the kernel's WireGuard) or userspace (wireguard-go in weftd).
# TYPE weft_wireguard_device_info gauge
weft_wireguard_device_info{device="flannel-wg",implementation="userspace"} 1
# HELP weft_wireguard_initiations_total Handshake initiations of each userspace device, by what became of them: retransmitted (sent again for want of a response), resent (sent to a peer's new endpoint at once), not_kept (the table of unanswered initiations was full, so neither).
# TYPE weft_wireguard_initiations_total counter
weft_wireguard_initiations_total{device="flannel-wg",event="not_kept"} 7
weft_wireguard_initiations_total{device="flannel-wg",event="resent"} 0
weft_wireguard_initiations_total{device="flannel-wg",event="retransmitted"} 5
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "weft_peer_ways", "weft_wireguard_device_info",
		"weft_wireguard_initiations_total"); err != nil {
		t.Error(err)
	}
}
