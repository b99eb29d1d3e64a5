package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftnet/weft/encap"
)

// wireguardCollector says which implementation runs each of the wireguard backend's
// devices: weft_wireguard_device_info{device="flannel-wg",implementation="userspace"} 1,
// and what each userspace device dropped:
// weft_wireguard_dropped_packets_total{device="flannel-wg",reason="invalid_mac1"}.
type wireguardCollector struct {
	d              *daemon
	info           *prometheus.Desc
	drops          *prometheus.Desc
	relayed, bytes *prometheus.Desc
	ways, changes  *prometheus.Desc
}

func newWireGuardCollector(d *daemon) *wireguardCollector {
	return &wireguardCollector{d: d,
		info: prometheus.NewDesc("weft_wireguard_device_info",
			"Always 1 for each device of the wireguard backend; implementation says what runs it: kernel (the kernel's WireGuard) or userspace (wireguard-go in weftd).",
			[]string{"device", "implementation"}, nil),
		drops: prometheus.NewDesc("weft_wireguard_dropped_packets_total",
			"Packets a userspace WireGuard device dropped, by reason: unknown_type, invalid_mac1, invalid_initiation, invalid_response, invalid_cookie_reply, handshake_under_load (a cookie reply sent instead), disallowed_source. Datagrams of the wrong size, and transport messages for no session or that fail to decrypt, are dropped uncounted.",
			[]string{"device", "reason"}, nil),
		relayed: prometheus.NewDesc("weft_relay_forwarded_packets_total",
			"WireGuard datagrams this host relayed, as they were, from one wireguard peer to another (peers that reach each other no other way).", nil, nil),
		bytes: prometheus.NewDesc("weft_relay_forwarded_bytes_total",
			"Bytes of the WireGuard datagrams this host relayed from one wireguard peer to another.", nil, nil),
		ways: prometheus.NewDesc("weft_peer_ways",
			"Peers outside our site by the way we reach them: punched (answering through NAT, both hosts dialing) or relayed.", []string{"way"}, nil),
		changes: prometheus.NewDesc("weft_path_changes_total",
			"Moves of a peer from one way (direct, punched, relayed) or relay to another.", nil, nil)}
}

func (c *wireguardCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.info
	ch <- c.drops
	ch <- c.relayed
	ch <- c.bytes
	ch <- c.ways
	ch <- c.changes
}

func (c *wireguardCollector) Collect(ch chan<- prometheus.Metric) {
	bp := c.d.be.Load()
	if bp == nil {
		return
	}
	rp, ok := (*bp).(encap.Reporter)
	if !ok {
		return
	}
	wg := rp.Report().WireGuard
	if wg == nil {
		return
	}
	for name, impl := range wg.Devices {
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, name, impl)
	}
	ch <- prometheus.MustNewConstMetric(c.relayed, prometheus.CounterValue, float64(wg.RelayedPackets))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(wg.RelayedBytes))
	ch <- prometheus.MustNewConstMetric(c.ways, prometheus.GaugeValue, float64(wg.Punched), "punched")
	ch <- prometheus.MustNewConstMetric(c.ways, prometheus.GaugeValue, float64(wg.Relayed), "relayed")
	ch <- prometheus.MustNewConstMetric(c.changes, prometheus.CounterValue, float64(wg.PathChanges))
	for dev, reasons := range wg.Drops {
		for reason, n := range reasons {
			ch <- prometheus.MustNewConstMetric(c.drops, prometheus.CounterValue, float64(n), dev, reason)
		}
	}
}
