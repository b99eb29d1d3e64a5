package encap

import (
	"encoding/json"

	"github.com/prometheus/client_golang/prometheus"
)

// Report is what a backend carries and counts at one moment (Reporter). Its JSON
// (MarshalJSON) is weftd's /stats; weftd's /metrics are made from its Peers and
// Repairs and the backend's own Metrics.
type Report struct {
	// Peers is the number of other hosts' leases the backend carries traffic for
	// (weftd's weft_peers gauge).
	Peers int
	// Repairs counts, by kind of object ("device", "route", "neigh", "fdb"), how often
	// the backend found something it had put in place missing or changed and wrote it
	// again (nil for a backend without a repair loop). Which kinds weftd's
	// weft_reconcile_repairs_total reports is the backend's RepairKinds
	// (RepairKindLister).
	Repairs map[string]uint64
	// Counters are a backend's other counters by name, served in /stats beside
	// "peers" when Stats is nil (a counter appears once it counted something).
	Counters map[string]uint64
	// Stats, when set, is what /stats serves instead of {"peers":N} and Counters: a
	// value of the backend's own, in the shape it documents, written by
	// encoding/json.
	Stats any
	// Metrics, when set, collects the backend's own metrics from this report (their
	// descriptions also come from the backend's package, through encap/factory, so
	// that weftd describes them before a backend runs).
	Metrics prometheus.Collector
}

// MarshalJSON writes the report as weftd's /stats serves it: the backend's Stats
// when it has some, else {"peers":N} and each of Counters beside it.
func (r Report) MarshalJSON() ([]byte, error) {
	if r.Stats != nil {
		return json.Marshal(r.Stats)
	}
	out := map[string]uint64{"peers": uint64(r.Peers)}
	for n, v := range r.Counters {
		out[n] = v
	}
	return json.Marshal(out)
}
