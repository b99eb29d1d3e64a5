package wireguard

import (
	"encoding/json"
	"maps"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/transport/wgbind"
)

// Devices are the devices the wireguard backend makes: flannel-wg and flannel-wg-v6,
// kernel WireGuard devices or TUNs a running weftd holds, each routing the whole
// overlay network of its family (`weftd cleanup` removes them).
var Devices = []encap.Device{
	{Name: Device, Types: []string{"wireguard", "tuntap"}, RoutesNetwork: true},
	{Name: DeviceV6, Types: []string{"wireguard", "tuntap"}, RoutesNetwork: true},
}

// Report returns the number of other hosts' leases the devices have a peer for,
// what Run put back, and as Stats and Metrics each device's implementation, the
// userspace devices' drops, and the ways and relays of the peers outside our site.
func (w *backend) Report() encap.Report {
	w.mu.Lock()
	defer w.mu.Unlock()
	devs := map[string]string{}
	var inits map[string]wgbind.InitiationCounts
	for _, d := range w.devs {
		if d == nil {
			continue
		}
		devs[d.Name()] = d.Kind()
		if r, ok := d.(initiationResender); ok {
			if inits == nil {
				inits = map[string]wgbind.InitiationCounts{}
			}
			inits[d.Name()] = r.Initiations()
		}
	}
	st := &stats{Peers: len(w.applied), Devices: devs, Drops: w.drops.snapshot(), Initiations: inits,
		PathChanges: w.pathChanges, LeftUnprobed: w.leftUnprobed}
	st.Punched, st.Relayed = w.countWays()
	if w.node != nil {
		st.RelayedPackets, st.RelayedBytes = w.node.Forwarded()
		st.PathDropped, st.PunchDropped = w.node.Dropped(), w.node.PunchDrops()
	}
	return encap.Report{Peers: st.Peers, Repairs: maps.Clone(w.repairs), Stats: st, Metrics: st}
}

// RepairKinds are the objects Run puts back: the devices and their routes.
func (w *backend) RepairKinds() []string { return []string{"device", "route"} }

// PublishSite puts our site into attrs: hosts of our site dial us at our interface's
// address, the others on evidence (direct, punched, or relayed); behindNAT says our
// public address is dead from outside.
func (w *backend) PublishSite(attrs *lease.Attrs, site string, ext encap.ExternalInterface, behindNAT bool) {
	attrs.Site, attrs.SiteIP, attrs.NAT = site, ext.IfaceIP, behindNAT
}

var (
	_ encap.Reporter         = (*backend)(nil)
	_ encap.RepairKindLister = (*backend)(nil)
	_ encap.SitePublisher    = (*backend)(nil)
)

// stats is what the wireguard backend reports of its devices: weftd's /stats
// (MarshalJSON) and its weft_wireguard_*, weft_relay_*, weft_peer_ways and
// weft_path_changes_total metrics (a prometheus.Collector).
type stats struct {
	// Peers is the number of other hosts' leases the devices have a peer for.
	Peers int
	// Devices names each device's implementation ("kernel" or "userspace").
	Devices map[string]string
	// Drops counts what each userspace device dropped, by device and reason (a kernel
	// device has none).
	Drops map[string]map[string]uint64
	// Initiations counts, for each userspace device, the handshake initiations its
	// Bind sent again and those it could not keep to (since the device was made).
	Initiations map[string]wgbind.InitiationCounts
	// RelayedPackets and RelayedBytes count the WireGuard datagrams this host relayed
	// from one peer to another, as they were (docs/sites.md).
	RelayedPackets, RelayedBytes uint64
	// Punched is how many peers answer on a punched way, Relayed how many are reached
	// through a relay; PathChanges counts the moves from one way or relay to another.
	Punched, Relayed int
	PathChanges      uint64
	// LeftUnprobed counts the ways left for want of an answer before the probes
	// had judged a round on them (tried for less than the probes' first round).
	LeftUnprobed uint64
	// PathDropped counts the frames the path socket dropped (malformed,
	// unauthenticated, replayed, unroutable, or not taken by the device), of which
	// PunchDropped were "punch now" messages (forged, replayed, older, straight).
	PathDropped, PunchDropped uint64
}

// MarshalJSON writes {"devices":{…},"drops":{…},"peers":N}, with a userspace device
// "initiations":{"flannel-wg":{"retransmitted":N,"resent":N,"not_kept":N}}, and on a
// relay "relayed":{"packets":N,"bytes":N}.
func (s *stats) MarshalJSON() ([]byte, error) {
	out := map[string]any{"peers": s.Peers, "devices": s.Devices, "drops": s.Drops}
	if len(s.Initiations) > 0 {
		out["initiations"] = s.Initiations
	}
	if s.RelayedPackets > 0 { // the key only on a relay: /stats as before elsewhere
		out["relayed"] = map[string]uint64{"packets": s.RelayedPackets, "bytes": s.RelayedBytes}
	}
	return json.Marshal(out)
}

// The wireguard backend's metrics (weftd's /metrics while it runs):
// weft_wireguard_device_info{device="flannel-wg",implementation="userspace"} 1,
// weft_wireguard_dropped_packets_total{device="flannel-wg",reason="invalid_mac1"}, the
// relayed datagrams, the ways to peers outside our site and the moves between them.
var (
	infoDesc = prometheus.NewDesc("weft_wireguard_device_info",
		"Always 1 for each device of the wireguard backend; implementation says what runs it: kernel (the kernel's WireGuard) or userspace (wireguard-go in weftd).",
		[]string{"device", "implementation"}, nil)
	dropsDesc = prometheus.NewDesc("weft_wireguard_dropped_packets_total",
		"Packets a userspace WireGuard device dropped, by reason: unknown_type, invalid_mac1, invalid_initiation, invalid_response, invalid_cookie_reply, handshake_under_load (a cookie reply sent instead), disallowed_source, replayed, relayed_not_taken (a relayed datagram the device's queue of 1,024 could not take, full or closed (counted in weft_path_dropped_frames_total too), or too large for its buffers). Datagrams of the wrong size, and transport messages for no session or that fail to decrypt, are dropped uncounted.",
		[]string{"device", "reason"}, nil)
	relayedDesc = prometheus.NewDesc("weft_relay_forwarded_packets_total",
		"WireGuard datagrams this host relayed, as they were, from one wireguard peer to another (peers that reach each other no other way).", nil, nil)
	relayedBytesDesc = prometheus.NewDesc("weft_relay_forwarded_bytes_total",
		"Bytes of the WireGuard datagrams this host relayed from one wireguard peer to another.", nil, nil)
	waysDesc = prometheus.NewDesc("weft_peer_ways",
		"Peers outside our site by the way we reach them: punched (answering through NAT, both hosts dialing) or relayed.", []string{"way"}, nil)
	changesDesc = prometheus.NewDesc("weft_path_changes_total",
		"Moves of a peer from one way (direct, punched, relayed) or relay to another.", nil, nil)
	unprobedDesc = prometheus.NewDesc("weft_path_left_unprobed_total",
		"Ways left for want of an answer before the probes had judged a round on them: a way's time (TryFor, or the probes' first round and 3 s) shorter than the probes' first round. 0 is right.", nil, nil)
	pathDroppedDesc = prometheus.NewDesc("weft_path_dropped_frames_total",
		"Frames the path socket (UDP 51822) dropped: malformed, unauthenticated, replayed, unroutable, or relayed datagrams the device could not take.", nil, nil)
	initiationsDesc = prometheus.NewDesc("weft_wireguard_initiations_total",
		"Handshake initiations of each userspace device, by what became of them: retransmitted (sent again for want of a response), resent (sent to a peer's new endpoint at once), not_kept (the table of unanswered initiations was full, so neither).",
		[]string{"device", "event"}, nil)
	punchDroppedDesc = prometheus.NewDesc("weft_path_punch_dropped_total",
		"\"Punch now\" messages dropped (counted in weft_path_dropped_frames_total too): a MAC that is not the peer's, replayed or older than the last, naming no address, or not sent through a relay.", nil, nil)
)

// DescribeMetrics sends the descriptions of the wireguard backend's metrics.
func DescribeMetrics(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{infoDesc, dropsDesc, relayedDesc, relayedBytesDesc, waysDesc, changesDesc, unprobedDesc, pathDroppedDesc, punchDroppedDesc, initiationsDesc} {
		ch <- d
	}
}

func (s *stats) Describe(ch chan<- *prometheus.Desc) { DescribeMetrics(ch) }

func (s *stats) Collect(ch chan<- prometheus.Metric) {
	for name, impl := range s.Devices {
		ch <- prometheus.MustNewConstMetric(infoDesc, prometheus.GaugeValue, 1, name, impl)
	}
	ch <- prometheus.MustNewConstMetric(relayedDesc, prometheus.CounterValue, float64(s.RelayedPackets))
	ch <- prometheus.MustNewConstMetric(relayedBytesDesc, prometheus.CounterValue, float64(s.RelayedBytes))
	ch <- prometheus.MustNewConstMetric(waysDesc, prometheus.GaugeValue, float64(s.Punched), "punched")
	ch <- prometheus.MustNewConstMetric(waysDesc, prometheus.GaugeValue, float64(s.Relayed), "relayed")
	ch <- prometheus.MustNewConstMetric(changesDesc, prometheus.CounterValue, float64(s.PathChanges))
	ch <- prometheus.MustNewConstMetric(unprobedDesc, prometheus.CounterValue, float64(s.LeftUnprobed))
	ch <- prometheus.MustNewConstMetric(pathDroppedDesc, prometheus.CounterValue, float64(s.PathDropped))
	ch <- prometheus.MustNewConstMetric(punchDroppedDesc, prometheus.CounterValue, float64(s.PunchDropped))
	for dev, c := range s.Initiations {
		ch <- prometheus.MustNewConstMetric(initiationsDesc, prometheus.CounterValue, float64(c.Retransmitted), dev, "retransmitted")
		ch <- prometheus.MustNewConstMetric(initiationsDesc, prometheus.CounterValue, float64(c.Resent), dev, "resent")
		ch <- prometheus.MustNewConstMetric(initiationsDesc, prometheus.CounterValue, float64(c.NotKept), dev, "not_kept")
	}
	for dev, reasons := range s.Drops {
		for reason, n := range reasons {
			ch <- prometheus.MustNewConstMetric(dropsDesc, prometheus.CounterValue, float64(n), dev, reason)
		}
	}
}
