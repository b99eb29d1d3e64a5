package paths

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"
)

// WriteTable writes r as `weftd peers` shows it: a line per peer, then the detail of
// each peer that is not up. now dates the SINCE column.
func (r Report) WriteTable(w io.Writer, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBNET\tPUBLIC IP\tBACKEND\tSTATE\tREASON\tRTT\tLOSS\tPATH MTU\tPATH\tSINCE")
	for _, p := range r.Peers {
		rtt, mtu := "-", "-"
		if p.RTTMicros > 0 {
			rtt = (time.Duration(p.RTTMicros) * time.Microsecond).String()
		}
		if p.PathMTU > 0 {
			mtu = strconv.Itoa(p.PathMTU)
			if p.RouteMTU > 0 {
				mtu += " (route)"
			}
		}
		reason := p.Reason
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.0f%%\t%s\t%s\t%s\n", p.Subnet, p.PublicIP, p.Backend,
			p.State, reason, rtt, 100*p.Loss, mtu, p.Path, ago(now, p.Since))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range r.Peers {
		if p.Detail != "" {
			if _, err := fmt.Fprintf(w, "\n%s (%s): %s\n", p.Subnet, p.State, p.Detail); err != nil {
				return err
			}
		}
	}
	if len(r.Peers) == 0 {
		_, err := fmt.Fprintln(w, "no peers (or a backend that programs no path: alloc, extension)")
		return err
	}
	return nil
}

// ago says how long ago t was, to the second.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Truncate(time.Second).String() + " ago"
}
