package wireguard

import (
	"maps"

	"github.com/weftnet/weft/encap"
)

// Report returns the number of other hosts' leases the devices have a peer for,
// what Run put back, each device's implementation and the userspace devices' drops.
func (w *backend) Report() encap.Report {
	w.mu.Lock()
	defer w.mu.Unlock()
	devs := map[string]string{}
	for _, d := range w.devs {
		if d != nil {
			devs[d.Name()] = d.Kind()
		}
	}
	wg := &encap.WireGuardReport{Devices: devs, Drops: w.drops.snapshot(), PathChanges: w.pathChanges}
	wg.Punched, wg.Relayed = w.countWays()
	if w.node != nil {
		wg.RelayedPackets, wg.RelayedBytes = w.node.Forwarded()
	}
	return encap.Report{Peers: len(w.applied), Repairs: maps.Clone(w.repairs), WireGuard: wg}
}
