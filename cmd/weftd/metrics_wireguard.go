package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftnet/weft/encap"
)

// wireguardCollector says which implementation runs each of the wireguard backend's
// devices: weft_wireguard_device_info{device="flannel-wg",implementation="userspace"} 1.
type wireguardCollector struct {
	d    *daemon
	info *prometheus.Desc
}

func newWireGuardCollector(d *daemon) *wireguardCollector {
	return &wireguardCollector{d: d, info: prometheus.NewDesc("weft_wireguard_device_info",
		"Always 1 for each device of the wireguard backend; implementation says what runs it: kernel (the kernel's WireGuard) or userspace (wireguard-go in weftd).",
		[]string{"device", "implementation"}, nil)}
}

func (c *wireguardCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.info }

func (c *wireguardCollector) Collect(ch chan<- prometheus.Metric) {
	bp := c.d.be.Load()
	if bp == nil {
		return
	}
	wd, ok := (*bp).(encap.WireGuardDevices)
	if !ok {
		return
	}
	for name, impl := range wd.WireGuardDevices() {
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, name, impl)
	}
}
