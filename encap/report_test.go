package encap

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/weftnet/weft/proxy"
)

// TestReportStatsJSON pins the JSON weftd's /stats serves for each kind of backend:
// a change of shape breaks the scripts that read it.
func TestReportStatsJSON(t *testing.T) {
	for _, c := range []struct {
		name string
		r    Report
		want string
	}{
		{"udp before Register", Report{Peers: 3, UDP: &proxy.Stats{}},
			`{"tx_packets":0,"tx_bytes":0,"tx_batches":0,"rx_packets":0,"rx_bytes":0,"rx_batches":0,"rx_writes":0,` +
				`"icmp_sent":0,"poll_sleeps":0,"drops":null,"tx_batch_sizes":[0,0,0,0,0,0,0,0],"rx_batch_sizes":[0,0,0,0,0,0,0,0]}`},
		{"udp", Report{Peers: 3, UDP: &proxy.Stats{TxPackets: 5, RxBytes: 700, Drops: map[string]uint64{"no_route": 2},
			TxBatchSizes: [8]uint64{1, 2}}},
			`{"tx_packets":5,"tx_bytes":0,"tx_batches":0,"rx_packets":0,"rx_bytes":700,"rx_batches":0,"rx_writes":0,` +
				`"icmp_sent":0,"poll_sleeps":0,"drops":{"no_route":2},"tx_batch_sizes":[1,2,0,0,0,0,0,0],"rx_batch_sizes":[0,0,0,0,0,0,0,0]}`},
		{"vxlan or host-gw", Report{Peers: 2, Repairs: map[string]uint64{"route": 1},
			Counters: map[string]uint64{"full_reconciles": 4, "applies": 9, "netlink_lists": 12}},
			`{"applies":9,"full_reconciles":4,"netlink_lists":12,"peers":2}`},
		{"vxlan or host-gw, nothing counted yet", Report{Repairs: map[string]uint64{}, Counters: map[string]uint64{}},
			`{"peers":0}`},
		{"wireguard", Report{Peers: 1, Repairs: map[string]uint64{"device": 1}, WireGuard: &WireGuardReport{
			Devices: map[string]string{"flannel-wg": "userspace", "flannel-wg-v6": "kernel"},
			Drops:   map[string]map[string]uint64{"flannel-wg": {"invalid_mac1": 3, "unknown_type": 0}}}},
			`{"devices":{"flannel-wg":"userspace","flannel-wg-v6":"kernel"},"drops":{"flannel-wg":{"invalid_mac1":3,"unknown_type":0}},"peers":1}`},
		{"wireguard, no device yet", Report{WireGuard: &WireGuardReport{Devices: map[string]string{},
			Drops: map[string]map[string]uint64{}}},
			`{"devices":{},"drops":{},"peers":0}`},
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
