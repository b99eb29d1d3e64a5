package encap

import (
	"encoding/json"

	"github.com/weftnet/weft/proxy"
)

// Report is what a backend carries and counts at one moment (Reporter). Which parts
// are set says which kind of backend made it; its JSON (MarshalJSON) is weftd's /stats.
type Report struct {
	// Peers is the number of other hosts' leases the backend carries traffic for
	// (weftd's weft_peers gauge).
	Peers int
	// Repairs counts, by kind of object ("device", "route", "neigh", "fdb"), how often
	// the backend found something it had put in place missing or changed and wrote it
	// again (vxlan, host-gw and wireguard; nil for the others).
	Repairs map[string]uint64
	// Counters are the kernel backends' (vxlan, host-gw) other counters by name:
	// full_reconciles, applies, netlink_lists, watch_restarts, bad_peers,
	// unreachable_peers (a counter appears once it counted something).
	Counters map[string]uint64
	// UDP is the udp data path's counters (udp only; zero before Register).
	UDP *proxy.Stats
	// WireGuard is the wireguard backend's devices and drops (wireguard only).
	WireGuard *WireGuardReport
}

// WireGuardReport is what the wireguard backend reports of its devices.
type WireGuardReport struct {
	// Devices names each device's implementation ("kernel" or "userspace").
	Devices map[string]string
	// Drops counts what each userspace device dropped, by device and reason (a kernel
	// device has none).
	Drops map[string]map[string]uint64
	// RelayedPackets and RelayedBytes count the WireGuard datagrams this host relayed
	// from one peer to another, as they were (docs/sites.md).
	RelayedPackets, RelayedBytes uint64
	// Punched is how many peers answer on a punched way, Relayed how many are reached
	// through a relay; PathChanges counts the moves from one way or relay to another.
	Punched, Relayed int
	PathChanges      uint64
}

// MarshalJSON writes the report as weftd's /stats serves it, in the shape of the
// backend that made it:
//
//   - udp: the data path's counters (proxy.Stats);
//   - wireguard: {"devices":{…},"drops":{…},"peers":N}, and on a relay
//     "relayed":{"packets":N,"bytes":N};
//   - otherwise (vxlan, host-gw): {"peers":N} and each of Counters beside it.
func (r Report) MarshalJSON() ([]byte, error) {
	switch {
	case r.UDP != nil:
		return json.Marshal(*r.UDP)
	case r.WireGuard != nil:
		out := map[string]any{"peers": r.Peers, "devices": r.WireGuard.Devices, "drops": r.WireGuard.Drops}
		if r.WireGuard.RelayedPackets > 0 { // the key only on a relay: /stats as before elsewhere
			out["relayed"] = map[string]uint64{"packets": r.WireGuard.RelayedPackets, "bytes": r.WireGuard.RelayedBytes}
		}
		return json.Marshal(out)
	}
	out := map[string]uint64{"peers": uint64(r.Peers)}
	for n, v := range r.Counters {
		out[n] = v
	}
	return json.Marshal(out)
}
