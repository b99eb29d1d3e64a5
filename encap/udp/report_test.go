package udp

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/weftnet/weft/proxy"
)

// TestReportStatsJSON pins the JSON weftd's /stats serves for the udp backend (the
// data path's counters, proxy.Stats, as they are): a change of shape breaks the
// scripts that read it.
func TestReportStatsJSON(t *testing.T) {
	for _, c := range []struct {
		name string
		st   proxy.Stats
		want string
	}{
		{"before Register", proxy.Stats{},
			`{"tx_packets":0,"tx_bytes":0,"tx_batches":0,"rx_packets":0,"rx_bytes":0,"rx_batches":0,"rx_writes":0,` +
				`"icmp_sent":0,"poll_sleeps":0,"drops":null,"tx_batch_sizes":[0,0,0,0,0,0,0,0],"rx_batch_sizes":[0,0,0,0,0,0,0,0]}`},
		{"counting", proxy.Stats{TxPackets: 5, RxBytes: 700, Drops: map[string]uint64{"no_route": 2},
			TxBatchSizes: [8]uint64{1, 2}},
			`{"tx_packets":5,"tx_bytes":0,"tx_batches":0,"rx_packets":0,"rx_bytes":700,"rx_batches":0,"rx_writes":0,` +
				`"icmp_sent":0,"poll_sleeps":0,"drops":{"no_route":2},"tx_batch_sizes":[1,2,0,0,0,0,0,0],"rx_batch_sizes":[0,0,0,0,0,0,0,0]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			// As /stats writes it: an Encoder, one line.
			var b bytes.Buffer
			if err := json.NewEncoder(&b).Encode(report(3, c.st)); err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != c.want+"\n" {
				t.Fatalf("/stats %s:\n got %s\nwant %s", c.name, got, c.want)
			}
		})
	}
}

// TestReportMetrics: the udp backend's metrics pass promlint and say what its
// counters say.
func TestReportMetrics(t *testing.T) {
	m := report(1, proxy.Stats{TxPackets: 5, RxPackets: 4, TxBytes: 500, RxBytes: 400, ICMPSent: 1,
		Drops: map[string]uint64{"no_route": 2}}).Metrics
	problems, err := testutil.CollectAndLint(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP weft_udp_packets_total Packets the udp backend carried: tx sent to peers, rx accepted from peers for flannel0.
# TYPE weft_udp_packets_total counter
weft_udp_packets_total{direction="rx"} 4
weft_udp_packets_total{direction="tx"} 5
# HELP weft_udp_icmp_unreachable_sent_total ICMP net unreachable (ICMPv6 no route) messages written back for destinations without a lease.
# TYPE weft_udp_icmp_unreachable_sent_total counter
weft_udp_icmp_unreachable_sent_total 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "weft_udp_packets_total", "weft_udp_icmp_unreachable_sent_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m, "weft_udp_dropped_packets_total"); n != len(proxy.DropReasons()) {
		t.Errorf("%d weft_udp_dropped_packets_total samples, want one per reason (%d)", n, len(proxy.DropReasons()))
	}
}
