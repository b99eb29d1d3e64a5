// Package status gathers the whole cluster for `weftd status`: in Kubernetes mode from
// the Node objects (the annotations weftd and flanneld publish, and weftd's
// WeftPeersReachable condition, which is all kube-flannel's RBAC lets a reader see),
// in etcd mode from the leases and, where asked, each host's GET /peers. It only
// reads; cmd/weftd fetches and prints.
package status

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/paths"
)

// Node is one host as the cluster shows it.
type Node struct {
	// Name is the Node's name (Kubernetes) or the lease's subnet (etcd).
	Name    string `json:"name"`
	Subnet  string `json:"subnet,omitempty"`
	Site    string `json:"site,omitempty"`
	Backend string `json:"backend,omitempty"`
	// Outside is the address peers send to: the NAT's outside address and port when
	// weft learnt one, else the published public IP.
	Outside string `json:"outside,omitempty"`
	// Version is the version of the weftd that runs there (empty: flanneld, an older
	// weftd, or not known in etcd mode).
	Version string `json:"version,omitempty"`
	// Reported says the node reports its peers (weftd's condition, or its /peers).
	Reported bool `json:"reported"`
	// Reachable says every peer it reports is reachable.
	Reachable bool `json:"reachable"`
	// Peers is what it reports: its peers, those down and degraded, and their ways.
	Peers paths.Summarized `json:"peers"`
	// Message is the report as the node gave it (the condition's message).
	Message string `json:"message,omitempty"`
	// LastChange is when the report last flipped (the condition's transition time).
	LastChange time.Time `json:"lastChange,omitzero"`
	// Error says why a report could not be read (an unreadable message, /peers not
	// answering).
	Error string `json:"error,omitempty"`
}

// Cluster is every node, sorted by name.
type Cluster struct {
	// Source is "kubernetes" or "etcd".
	Source string `json:"source"`
	Nodes  []Node `json:"nodes"`
}

// Summary counts a Cluster.
type Summary struct {
	Nodes int `json:"nodes"`
	// Reporting nodes report their peers; AllReachable of them reach every one.
	Reporting    int        `json:"reporting"`
	AllReachable int        `json:"allReachable"`
	Ways         paths.Ways `json:"ways"`
}

// Summary counts the nodes, those that report, those that reach every peer, and
// the ways of every reported peer.
func (c Cluster) Summary() Summary {
	s := Summary{Nodes: len(c.Nodes)}
	for _, n := range c.Nodes {
		if !n.Reported {
			continue
		}
		s.Reporting++
		if n.Reachable {
			s.AllReachable++
		}
		s.Ways.Direct += n.Peers.Ways.Direct
		s.Ways.Punched += n.Peers.Ways.Punched
		s.Ways.Relayed += n.Peers.Ways.Relayed
	}
	return s
}

// Healthy says no node reports an unreachable peer.
func (c Cluster) Healthy() bool {
	return !slices.ContainsFunc(c.Nodes, func(n Node) bool { return n.Reported && !n.Reachable })
}

// FromNodes reads the cluster from its Node objects: prefix is the annotation keys'
// start (flannel.alpha.coreos.com/ by default, kube.KeyPrefix), conditionType weftd's
// condition (WeftPeersReachable).
func FromNodes(nodes []corev1.Node, prefix, conditionType string) Cluster {
	c := Cluster{Source: "kubernetes", Nodes: make([]Node, 0, len(nodes))}
	for _, kn := range nodes {
		ann := kn.Annotations
		n := Node{Name: kn.Name, Subnet: kn.Spec.PodCIDR, Site: ann[annSite], Backend: ann[prefix+"backend-type"],
			Outside: cmp.Or(ann[annOutside], ann[prefix+"public-ip"]), Version: ann[annVersion]}
		for _, cond := range kn.Status.Conditions {
			if string(cond.Type) != conditionType {
				continue
			}
			n.Reported, n.Reachable = true, cond.Status == corev1.ConditionTrue
			n.Message, n.LastChange = cond.Message, cond.LastTransitionTime.Time
			if s, err := paths.ParseSummary(cond.Message); err != nil {
				n.Error = err.Error()
			} else {
				n.Peers = s
			}
		}
		c.Nodes = append(c.Nodes, n)
	}
	c.sort()
	return c
}

// The weft annotations FromNodes reads (lease/kube writes them).
const (
	annSite    = "weft.weftnet.io/site"
	annOutside = "weft.weftnet.io/outside"
	annVersion = "weft.weftnet.io/version"
)

// FromLeases reads the cluster from the leases (etcd mode): who is there, on which
// backend and address; nothing of their peers (AddPeers asks the hosts).
func FromLeases(leases []lease.Lease) Cluster {
	c := Cluster{Source: "etcd", Nodes: make([]Node, 0, len(leases))}
	for _, l := range leases {
		sn := l.Subnet
		if !sn.IsValid() || sn.Bits() == 0 { // IPv6-only
			sn = l.IPv6Subnet
		}
		n := Node{Name: sn.String(), Subnet: sn.String(), Site: l.Attrs.Site, Backend: cmp.Or(l.Attrs.BackendType, "udp")}
		switch {
		case l.Attrs.Outside.IsValid():
			n.Outside = l.Attrs.Outside.String()
		case l.Attrs.PublicIP.IsValid() && !l.Attrs.PublicIP.IsUnspecified():
			n.Outside = l.Attrs.PublicIP.String()
		case l.Attrs.PublicIPv6.IsValid():
			n.Outside = l.Attrs.PublicIPv6.String()
		}
		c.Nodes = append(c.Nodes, n)
	}
	c.sort()
	return c
}

// SetPeers records node i's own report of its peers (its GET /peers), or why none
// came (err).
func (c *Cluster) SetPeers(i int, rep paths.Report, err error) {
	n := &c.Nodes[i]
	if err != nil {
		n.Error = err.Error()
		return
	}
	ok, msg := rep.Summary()
	s, perr := paths.ParseSummary(msg)
	if perr != nil { // Summary's own message: cannot happen
		n.Error = perr.Error()
		return
	}
	n.Reported, n.Reachable, n.Message, n.Peers = true, ok, msg, s
	for _, p := range rep.Peers {
		if p.Since.After(n.LastChange) {
			n.LastChange = p.Since
		}
	}
}

func (c *Cluster) sort() {
	slices.SortFunc(c.Nodes, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
}

// WriteText writes the screen: the summary line, the nodes with a problem (a peer
// down, a report unreadable), then a table of every node; now dates the changes.
func (c Cluster) WriteText(w io.Writer, now time.Time) error {
	s := c.Summary()
	b := &strings.Builder{}
	fmt.Fprintf(b, "%s: %d nodes, %d of %d reporting reach every peer", c.Source, s.Nodes, s.AllReachable, s.Reporting)
	if quiet := s.Nodes - s.Reporting; quiet > 0 {
		fmt.Fprintf(b, ", %d not reporting", quiet)
	}
	fmt.Fprintf(b, "; ways: %d direct, %d punched, %d relayed\n", s.Ways.Direct, s.Ways.Punched, s.Ways.Relayed)
	var problems []string
	for _, n := range c.Nodes {
		switch {
		case n.Reported && !n.Reachable:
			down := strings.Join(n.Peers.Down, "; ")
			if n.Peers.Cut {
				down = fmt.Sprintf("%d peers, among them %s", n.Peers.Unreachable, down)
			}
			if n.Error != "" {
				down = n.Message // the condition, unreadable: as it is
			}
			problems = append(problems, fmt.Sprintf("  %s cannot reach %s (changed %s)", n.Name, down, ago(n.LastChange, now)))
		case n.Error != "":
			problems = append(problems, fmt.Sprintf("  %s: %s", n.Name, n.Error))
		}
	}
	if len(problems) > 0 {
		fmt.Fprintf(b, "\nProblems:\n%s\n", strings.Join(problems, "\n"))
	}
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSUBNET\tSITE\tBACKEND\tOUTSIDE\tVERSION\tPEERS\tWAYS\tLAST CHANGE")
	for _, n := range c.Nodes {
		peers, ways, changed := "-", "-", "-"
		switch {
		case n.Reported && n.Error != "":
			peers, ways, changed = "?", "?", ago(n.LastChange, now)
		case n.Reported:
			peers = fmt.Sprintf("%d of %d reachable", n.Peers.Peers-n.Peers.Unreachable, n.Peers.Peers)
			ways = fmt.Sprintf("%d/%d/%d", n.Peers.Ways.Direct, n.Peers.Ways.Punched, n.Peers.Ways.Relayed)
			if n.Peers.Cut {
				ways = "?" // cut from the condition's message
			}
			changed = ago(n.LastChange, now)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, dash(n.Subnet), dash(n.Site), dash(n.Backend),
			dash(n.Outside), dash(n.Version), peers, ways, changed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	foot := "(WAYS: direct/punched/relayed)\n"
	if c.Source == "kubernetes" {
		foot = "(WAYS: direct/punched/relayed; VERSION empty: flanneld or a weftd before 0.2)\n"
	}
	_, err := io.WriteString(w, foot)
	return err
}

func dash(s string) string { return cmp.Or(s, "-") }

// ago is how long before now t was, to the second ("-" for no time).
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String() + " ago"
}
