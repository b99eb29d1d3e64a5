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
			"Packets this host relayed from one wireguard peer to another (peers behind NAT in different sites; userspace devices).", nil, nil),
		bytes: prometheus.NewDesc("weft_relay_forwarded_bytes_total",
			"Bytes of the packets this host relayed from one wireguard peer to another.", nil, nil)}
}

func (c *wireguardCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.info
	ch <- c.drops
	ch <- c.relayed
	ch <- c.bytes
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
	for dev, reasons := range wg.Drops {
		for reason, n := range reasons {
			ch <- prometheus.MustNewConstMetric(c.drops, prometheus.CounterValue, float64(n), dev, reason)
		}
	}
}
