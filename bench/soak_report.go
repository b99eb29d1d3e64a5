package bench

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"
)

// SoakReport is the score of a soak.
type SoakReport struct {
	Backend       string                 `json:"backend"`
	Hosts         int                    `json:"hosts"`
	Duration      time.Duration          `json:"duration"`
	Elapsed       time.Duration          `json:"elapsed"`
	PingsSent     int                    `json:"pings_sent"`
	PingsLost     int                    `json:"pings_lost"`
	Events        map[string]*EventScore `json:"events"`
	LeasesLost    int                    `json:"leases_lost"`    // must be 0
	SubnetChanges int                    `json:"subnet_changes"` // must be 0
	Unreachable   []string               `json:"unreachable"`    // pod pairs without a reply at the end
	Daemons       []DaemonScore          `json:"daemons"`
	Errors        []string               `json:"errors"` // events that failed to happen
}

// EventScore is what one type of event cost the ping ring.
type EventScore struct {
	Count int `json:"count"`
	Lost  int `json:"lost"` // pings lost after it, before the next event
	// MaxRecover is the longest time from one such event to the last ping it lost
	// (plus one interval); 0 when it cost nothing.
	MaxRecover time.Duration `json:"max_recover"`
}

// DaemonScore is one weftd's resource use at the soak's start and end (the end is its
// last process's, after Restarts kills).
type DaemonScore struct {
	Host     string    `json:"host"`
	Start    ProcUsage `json:"start"`
	End      ProcUsage `json:"end"`
	Restarts int       `json:"restarts"`
}

// OK reports whether the soak kept every lease and subnet and every pod reachable.
func (r *SoakReport) OK() bool {
	return r.LeasesLost == 0 && r.SubnetChanges == 0 && len(r.Unreachable) == 0
}

// WriteTable writes the score as Markdown tables.
func (r *SoakReport) WriteTable(w io.Writer) error {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("soak: %s backend, %d hosts, %v (ping ring, one ping every %v per host)\n\n",
		r.Backend, r.Hosts, r.Elapsed.Round(time.Second), soakPingInterval)
	p("| event | times | pings lost | longest recovery |\n|---|---:|---:|---:|\n")
	var names []string
	for n := range r.Events {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		e := r.Events[n]
		p("| %s | %d | %d | %v |\n", n, e.Count, e.Lost, e.MaxRecover.Round(time.Millisecond))
	}
	p("| **all** | | %d of %d | |\n\n", r.PingsLost, r.PingsSent)
	p("leases lost: %d; subnet changes: %d; unreachable at the end: %d %v\n\n",
		r.LeasesLost, r.SubnetChanges, len(r.Unreachable), r.Unreachable)
	hours := r.Elapsed.Hours()
	p("| weftd | restarts | goroutines start/end | threads start/end | fds start/end | RSS MiB start/end | log lines/hour |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, d := range r.Daemons {
		rate := 0.0
		if hours > 0 {
			rate = float64(d.End.LogLines-d.Start.LogLines) / hours
		}
		p("| %s | %d | %s / %s | %d / %d | %d / %d | %.1f / %.1f | %.0f |\n", d.Host, d.Restarts,
			count(d.Start.Goroutines), count(d.End.Goroutines), d.Start.Threads, d.End.Threads, d.Start.FDs, d.End.FDs,
			float64(d.Start.RSSKiB)/1024, float64(d.End.RSSKiB)/1024, rate)
	}
	if len(r.Errors) > 0 {
		p("\nevents that failed:\n")
		for _, e := range r.Errors {
			p("- %s\n", e)
		}
	}
	return nil
}

// count shows a number that may be unknown (-1).
func count(n int) string {
	if n < 0 {
		return "?"
	}
	return strconv.Itoa(n)
}
