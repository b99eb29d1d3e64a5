package udp

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/proxy"
)

// Devices are the devices the udp backend makes: flannel0, which routes the whole
// overlay network (`weftd cleanup` removes it).
var Devices = []encap.Device{{Name: UDPDevice, Types: []string{"tuntap"}, RoutesNetwork: true}}

// The udp backend's metrics (weftd's /metrics while it runs).
var (
	packetsDesc = prometheus.NewDesc("weft_udp_packets_total",
		"Packets the udp backend carried: tx sent to peers, rx accepted from peers for flannel0.", []string{"direction"}, nil)
	bytesDesc = prometheus.NewDesc("weft_udp_bytes_total",
		"Bytes of inner IP packets the udp backend carried, by direction.", []string{"direction"}, nil)
	droppedDesc = prometheus.NewDesc("weft_udp_dropped_packets_total",
		"Packets the udp backend dropped, by reason.", []string{"reason"}, nil)
	icmpDesc = prometheus.NewDesc("weft_udp_icmp_unreachable_sent_total",
		"ICMP net unreachable (ICMPv6 no route) messages written back for destinations without a lease.", nil, nil)
)

// DescribeMetrics sends the descriptions of the udp backend's metrics.
func DescribeMetrics(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{packetsDesc, bytesDesc, droppedDesc, icmpDesc} {
		ch <- d
	}
}

// metrics are the data path's counters at one moment as metrics (Report.Metrics).
type metrics proxy.Stats

func (m metrics) Describe(ch chan<- *prometheus.Desc) { DescribeMetrics(ch) }

func (m metrics) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	st := proxy.Stats(m)
	counter(packetsDesc, st.TxPackets, "tx")
	counter(packetsDesc, st.RxPackets, "rx")
	counter(bytesDesc, st.TxBytes, "tx")
	counter(bytesDesc, st.RxBytes, "rx")
	counter(icmpDesc, st.ICMPSent)
	for _, r := range proxy.DropReasons() {
		counter(droppedDesc, st.Dropped(r), r.String())
	}
}
