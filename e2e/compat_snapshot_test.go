package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/lease"
)

// compatView is what a user can see of one daemon on one host, item by item, each item
// a normalised text: the host's own subnet, its vxlan MAC and the firewall chains'
// names are replaced by placeholders so that flanneld's and weftd's hosts compare.
type compatView map[string]string

// absent marks an item one side has and the other has not.
const absent = "<absent>"

// hostView reads a compatView from a host namespace: subnet.env at envPath, the own
// lease value leaseVal (empty: none), devices, addresses, routes, neighbours, fdb and
// iptables rules.
func hostView(ctx context.Context, ns *netns.NS, envPath, ownLease string, leaseVal string) (compatView, error) {
	s := compatView{}
	n := normaliser{}
	if data, err := os.ReadFile(envPath); err == nil {
		env, err := lease.ReadSubnetEnv(envPath)
		if err != nil {
			return nil, fmt.Errorf("subnet.env: %w", err)
		}
		n.own, n.own6 = env.Subnet.Masked(), env.IPv6Subnet.Masked()
		s["subnet.env"] = n.lines(string(data), nil)
	} else {
		s["subnet.env"] = absent
	}
	links, err := linkList(ctx, ns)
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		switch {
		case strings.HasPrefix(l.Name, "flannel-v6.") && l.Kind == "vxlan":
			n.ownMAC6 = l.Address
		case strings.HasPrefix(l.Name, "flannel") && l.Kind == "vxlan":
			n.ownMAC = l.Address
		}
	}
	for _, l := range links {
		if !strings.HasPrefix(l.Name, "flannel") {
			continue
		}
		s["dev "+l.Name] = n.text(l.describe())
		out, err := ns.Run(ctx, "ip", "-4", "-o", "addr", "show", "dev", l.Name)
		if err != nil {
			return nil, err
		}
		s["addr "+l.Name] = n.text(fieldsAfter(out, "inet"))
		out, err = ns.Run(ctx, "ip", "-6", "-o", "addr", "show", "dev", l.Name, "scope", "global")
		if err != nil {
			return nil, err
		}
		if v6 := n.text(fieldsAfter(out, "inet6")); v6 != "" {
			s["addr6 "+l.Name] = v6
		}
		if l.Kind == "vxlan" {
			out, err := ns.Run(ctx, "bridge", "fdb", "show", "dev", l.Name)
			if err != nil {
				return nil, err
			}
			s["fdb "+l.Name] = n.lines(out, nil)
		}
	}
	out, err := ns.Run(ctx, "ip", "-4", "route", "show", "table", "main")
	if err != nil {
		return nil, err
	}
	s["routes"] = n.lines(out, nil)
	out, err = ns.Run(ctx, "ip", "-4", "neigh", "show", "nud", "permanent")
	if err != nil {
		return nil, err
	}
	s["neigh"] = n.lines(out, nil)
	// IPv6: the overlay's routes (the kernel's own routes for the underlay and
	// link-local addresses are the same on both sides), permanent neighbours.
	out, err = ns.Run(ctx, "ip", "-6", "route", "show", "table", "main")
	if err != nil {
		return nil, err
	}
	s["routes6"] = n.lines(out, nil)
	out, err = ns.Run(ctx, "ip", "-6", "neigh", "show", "nud", "permanent")
	if err != nil {
		return nil, err
	}
	s["neigh6"] = n.lines(out, nil)
	if ownLease != "" {
		leaseItems(s, n, leaseVal)
	}
	for _, save := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat", "mangle"} {
			out, err := ns.Run(ctx, save+"-save", "-t", table)
			if err != nil {
				return nil, err
			}
			s[save+" "+table] = n.lines(out, func(l string) string {
				if strings.HasPrefix(l, "#") || l == "COMMIT" {
					return ""
				}
				return iptRule(l)
			})
		}
	}
	out, err = ns.Run(ctx, "nft", "list", "ruleset")
	if err != nil {
		return nil, err
	}
	s["nft ruleset"] = n.lines(out, nftRule)
	return s, nil
}

var (
	nftComment  = regexp.MustCompile(`(^| )comment "[^"]*"`)
	nftCounters = regexp.MustCompile(`counter( packets \d+ bytes \d+)? ?`)
	// The tables flanneld's and weftd's nftables firewalls make (iptables-nft's own
	// tables show up here too, under their iptables names).
	nftTables = strings.NewReplacer("table ip flannel-ipv4", "table ip <table>", "table ip weft", "table ip <table>",
		"table ip6 flannel-ipv6", "table ip6 <table>", "table ip6 weft", "table ip6 <table>")
)

// nftRule normalises one line of nft list ruleset: no counter statements (weftd's
// rules count, flanneld's do not), no comments, the table's name as a
// placeholder, the chain names of iptables-nft's tables as iptRule gives them.
func nftRule(l string) string {
	l = nftComment.ReplaceAllString(l, "")
	l = nftCounters.ReplaceAllString(l, "")
	return strings.TrimSpace(iptChains.Replace(nftTables.Replace(l)))
}

// leaseItems splits the own lease's JSON value into one item per field.
func leaseItems(s compatView, n normaliser, val string) {
	if val == "" {
		s["lease"] = absent
		return
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(val), &m); err != nil {
		s["lease"] = "not JSON: " + val
		return
	}
	for _, k := range []string{"PublicIP", "PublicIPv6", "BackendType", "BackendData", "BackendV6Data", "WeftHostID"} {
		v, ok := m[k]
		switch {
		case !ok:
			s["lease."+k] = absent
		case k == "WeftHostID":
			s["lease."+k] = "<host id>"
		default:
			s["lease."+k] = n.text(canonicalJSON(v))
		}
		delete(m, k)
	}
	for k, v := range m {
		s["lease."+k] = string(v)
	}
}

func canonicalJSON(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	out, _ := json.Marshal(v) // maps come out with sorted keys
	return string(out)
}

var (
	iptCounters = regexp.MustCompile(`\[\d+:\d+\]`)
	iptComment  = regexp.MustCompile(`-m comment --comment ("[^"]*"|\S+) ?`)
	// The chains flanneld and weftd (cmd/weftd today, firewall/ later) make.
	iptChains = strings.NewReplacer("FLANNEL-POSTRTG", "<masq-chain>", "WEFT-POSTRTG", "<masq-chain>",
		"FLANNEL-FWD", "<fwd-chain>", "WEFT-FWD", "<fwd-chain>")
)

// iptRule normalises one iptables-save line: no counters, no comments (their text
// names the daemon), chain names as placeholders.
func iptRule(l string) string {
	l = iptCounters.ReplaceAllString(l, "")
	l = iptComment.ReplaceAllString(l, "")
	return strings.TrimSpace(iptChains.Replace(l))
}

// normaliser replaces what differs between two hosts by design: the subnet each
// daemon picked at random and the vxlan device's random MAC.
type normaliser struct {
	own, own6       netip.Prefix // the IPv4 and IPv6 subnets
	ownMAC, ownMAC6 string       // of flannel.<VNI> and flannel-v6.<VNI>
}

func (n normaliser) text(s string) string {
	if n.own.IsValid() {
		net := n.own.Addr()
		s = replaceIP(s, net.Next(), "<own+1>")
		s = replaceIP(s, net, "<own>")
	}
	if n.own6.IsValid() {
		net := n.own6.Addr()
		s = replaceIP(s, net.Next(), "<own6+1>")
		s = replaceIP(s, net, "<own6>")
	}
	if n.ownMAC != "" {
		s = strings.ReplaceAll(s, n.ownMAC, "<own-mac>")
	}
	if n.ownMAC6 != "" {
		s = strings.ReplaceAll(s, n.ownMAC6, "<own-mac6>")
	}
	return s
}

// lines normalises each line (each through f first, if given; "" drops it) and
// sorts them.
func (n normaliser) lines(out string, f func(string) string) string {
	var ls []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.Join(strings.Fields(l), " ")
		if f != nil {
			l = f(l)
		}
		if l != "" {
			ls = append(ls, n.text(l))
		}
	}
	sort.Strings(ls)
	if len(ls) == 0 {
		return "<none>"
	}
	return strings.Join(ls, "\n")
}

func replaceIP(s string, ip netip.Addr, with string) string {
	re := regexp.MustCompile(`(^|[^0-9.])` + regexp.QuoteMeta(ip.String()) + `($|[^0-9])`)
	if ip.Is6() {
		re = regexp.MustCompile(`(^|[^0-9a-f:])` + regexp.QuoteMeta(ip.String()) + `($|[^0-9a-f:])`)
	}
	for {
		r := re.ReplaceAllString(s, "${1}"+with+"${2}")
		if r == s {
			return r
		}
		s = r
	}
}

// fieldsAfter returns, for each line of out, the fields from word on.
func fieldsAfter(out, word string) string {
	var res []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		for i, w := range f {
			if w == word {
				// drop the "valid_lft forever preferred_lft forever" tail of ip -o
				rest, _, _ := strings.Cut(strings.Join(f[i:], " "), "\\")
				res = append(res, strings.TrimSpace(rest))
				break
			}
		}
	}
	sort.Strings(res)
	return strings.Join(res, "\n")
}

// link is what ip -d -j link says of one device, as much as a user would look at.
type link struct {
	Name     string
	Kind     string
	MTU      int
	Flags    []string
	Address  string
	InfoData map[string]any
}

func (l link) describe() string {
	flags := append([]string(nil), l.Flags...)
	sort.Strings(flags)
	data, _ := json.Marshal(l.InfoData) // sorted keys
	return fmt.Sprintf("kind=%s mtu=%d flags=%s mac=%s data=%s", l.Kind, l.MTU, strings.Join(flags, ","), l.Address, data)
}

func linkList(ctx context.Context, ns *netns.NS) ([]link, error) {
	out, err := ns.Run(ctx, "ip", "-d", "-j", "link", "show")
	if err != nil {
		return nil, err
	}
	var raw []struct {
		Ifname   string   `json:"ifname"`
		MTU      int      `json:"mtu"`
		Flags    []string `json:"flags"`
		Address  string   `json:"address"`
		Linkinfo struct {
			InfoKind string         `json:"info_kind"`
			InfoData map[string]any `json:"info_data"`
		} `json:"linkinfo"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		return nil, fmt.Errorf("ip -j link: %w: %s", err, out)
	}
	var ls []link
	for _, r := range raw {
		ls = append(ls, link{Name: r.Ifname, Kind: r.Linkinfo.InfoKind, MTU: r.MTU, Flags: r.Flags,
			Address: r.Address, InfoData: r.Linkinfo.InfoData})
	}
	return ls, nil
}
