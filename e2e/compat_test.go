package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
)

// compatCase is one input given alike to the upstream flanneld and to weftd.
type compatCase struct {
	name    string
	config  string   // the network config
	args    []string // more flags for both daemons
	env     []string // more environment for both daemons
	noIface bool     // no --iface=eth0 from the lab: args choose the interface
	ext1    bool     // the host gets a second interface, ext1, with 198.51.100.200/24
	bad     bool     // both daemons must refuse it: no subnet.env
	restart bool     // stop and start again: subnet and vxlan MAC kept?
}

// peerRoute reports whether the peer's lease must show up as a route: on the kernel
// backends, unless the host uses ext1, from which host-gw cannot reach the peer.
func (c compatCase) peerRoute() bool {
	cfg := strings.ToLower(c.config)
	return strings.Contains(cfg, "vxlan") || strings.Contains(cfg, "host-gw") && !c.ext1
}

// peerLeases reports whether the case gets a peer's lease: not on an IPv6-only network,
// where flanneld v0.28.10 in etcd mode takes any IPv6-only lease (PublicIP 0.0.0.0,
// like its own) as its own (docs/compatibility.md, IPv6).
func (c compatCase) peerLeases() bool {
	cfg, err := lease.ParseConfig([]byte(c.config))
	return err == nil && cfg.EnableIPv4
}

const n16 = `"Network":"198.18.0.0/16"`

// v6net is the IPv6 half of the dual-stack and IPv6-only cases.
const v6net = `"EnableIPv6":true,"IPv6Network":"fd00:db8::/48"`

// compatCases is the table of inputs: every backend, every Backend option, case
// variants, MTU given or not, SubnetLen/Min/Max edges, --ip-masq, the interface
// flags, bad configs.
var compatCases = []compatCase{
	{name: "udp", config: `{` + n16 + `,"Backend":{"Type":"udp"}}`, restart: true},
	{name: "udp-no-backend", config: `{` + n16 + `}`},
	{name: "udp-port-mtu", config: `{` + n16 + `,"Backend":{"Type":"udp","Port":8300,"MTU":1400}}`},
	{name: "udp-weft-options", config: `{` + n16 + `,"Backend":{"Type":"udp","Workers":1,"BusyPoll":"10ms"}}`},
	{name: "udp-lower-case", config: `{"network":"198.18.0.0/16","backend":{"type":"udp","port":8301}}`},
	{name: "vxlan", config: `{` + n16 + `,"Backend":{"Type":"vxlan"}}`, restart: true},
	{name: "vxlan-lower-case-vni", config: `{` + n16 + `,"Backend":{"type":"vxlan","vni":2}}`},
	{name: "vxlan-vni-0", config: `{` + n16 + `,"Backend":{"Type":"vxlan","VNI":0}}`},
	{name: "vxlan-mtu", config: `{` + n16 + `,"Backend":{"Type":"vxlan","MTU":1450}}`},
	{name: "vxlan-port-gbp-learning", config: `{` + n16 + `,"Backend":{"Type":"vxlan","Port":4789,"GBP":true,"Learning":true}}`},
	{name: "vxlan-directrouting", config: `{` + n16 + `,"Backend":{"Type":"vxlan","DirectRouting":true}}`},
	{name: "vxlan-macprefix", config: `{` + n16 + `,"Backend":{"Type":"vxlan","MacPrefix":"0E-2A"}}`},
	{name: "host-gw", config: `{` + n16 + `,"Backend":{"Type":"host-gw"}}`},
	{name: "alloc", config: `{` + n16 + `,"Backend":{"Type":"alloc"}}`},
	{name: "subnetlen-30", config: `{` + n16 + `,"SubnetLen":30,"Backend":{"Type":"vxlan"}}`},
	{name: "network-28-default-len", config: `{"Network":"198.18.0.0/28","Backend":{"Type":"host-gw"}}`},
	{name: "subnet-min-max", config: `{` + n16 + `,"SubnetLen":26,"SubnetMin":"198.18.7.64","SubnetMax":"198.18.7.64","Backend":{"Type":"vxlan"}}`},
	{name: "ip-masq-vxlan", config: `{` + n16 + `,"Backend":{"Type":"vxlan"}}`, args: []string{"--ip-masq"}},
	{name: "ip-masq-udp-not-random", config: `{` + n16 + `}`, args: []string{"--ip-masq", "--ip-masq-fully-random-disable"}},
	{name: "nftables-ip-masq", config: `{` + n16 + `,"EnableNFTables":true,"Backend":{"Type":"vxlan"}}`, args: []string{"--ip-masq"}},
	{name: "no-forward-rules", config: `{` + n16 + `,"Backend":{"Type":"host-gw"}}`, args: []string{"--iptables-forward-rules=false"}},
	{name: "iface-regex-comma", config: `{` + n16 + `,"Backend":{"Type":"vxlan"}}`, noIface: true, ext1: true,
		args: []string{"--iface-regex=^ext[0-9]{1,2}$"}},
	{name: "iface-regex-env", config: `{` + n16 + `,"Backend":{"Type":"host-gw"}}`, noIface: true, ext1: true,
		env: []string{"FLANNELD_IFACE_REGEX=^ext[0-9]{1,2}$"}},
	{name: "iface-fallthrough", config: `{` + n16 + `,"Backend":{"Type":"vxlan"}}`, noIface: true, ext1: true,
		args: []string{"--iface=nope", "--iface-regex=^198\\.51\\.100\\."}},
	{name: "iface-can-reach", config: `{` + n16 + `,"Backend":{"Type":"host-gw"}}`, noIface: true, ext1: true,
		args: []string{"--iface-can-reach=198.51.100.7"}},
	{name: "iface-by-ip", config: `{` + n16 + `,"Backend":{"Type":"udp"}}`, noIface: true, ext1: true,
		args: []string{"--iface=198.51.100.200"}},
	{name: "public-ip", config: `{` + n16 + `,"Backend":{"Type":"vxlan"}}`, args: []string{"--public-ip=192.0.2.200"}},
	{name: "vxlan-dual-stack", config: `{` + n16 + `,` + v6net + `,"Backend":{"Type":"vxlan"}}`, restart: true},
	{name: "vxlan-ipv6-only", config: `{"EnableIPv4":false,` + v6net + `,"Backend":{"Type":"vxlan"}}`, restart: true},
	{name: "vxlan-directrouting-dual-stack", config: `{` + n16 + `,` + v6net + `,"Backend":{"Type":"vxlan","DirectRouting":true}}`},
	{name: "host-gw-dual-stack", config: `{` + n16 + `,` + v6net + `,"Backend":{"Type":"host-gw"}}`},
	{name: "ip-masq-dual-stack", config: `{` + n16 + `,` + v6net + `,"Backend":{"Type":"vxlan"}}`, args: []string{"--ip-masq"}},
	{name: "nftables-ip-masq-dual-stack", config: `{` + n16 + `,` + v6net + `,"EnableNFTables":true,"Backend":{"Type":"vxlan"}}`,
		args: []string{"--ip-masq"}},
	{name: "bad-subnetlen-31", config: `{` + n16 + `,"SubnetLen":31}`, bad: true},
	{name: "bad-two-subnets", config: `{` + n16 + `,"SubnetLen":17}`, bad: true},
	{name: "bad-no-network", config: `{"Backend":{"Type":"vxlan"}}`, bad: true},
	{name: "bad-vni-string", config: `{` + n16 + `,"Backend":{"Type":"vxlan","VNI":"x"}}`, bad: true},
	{name: "bad-backend-type", config: `{` + n16 + `,"Backend":{"Type":"bogus"}}`, bad: true},
	{name: "bad-min-outside", config: `{` + n16 + `,"SubnetMin":"10.0.0.0"}`, bad: true},
	{name: "unknown-vxlan-option", config: `{` + n16 + `,"Backend":{"Type":"vxlan","Bogus":1}}`},
	{name: "bad-not-json", config: `{"Network":`, bad: true},
}

// peerIP is the PublicIP of the peer lease written before each daemon starts: on
// LAN1, so host-gw and DirectRouting take it as directly reachable. peerIPv6 is its
// PublicIPv6, on the IPv6 underlay every host gets (hostIPv6).
const (
	peerIP   = "192.0.2.250"
	peerIPv6 = "2001:db8:1::fa"
)

// hostIPv6 is the IPv6 underlay address of host c<i>, the same in both labs.
func hostIPv6(i int) string { return fmt.Sprintf("2001:db8:1::%x", 0x100+i) }

// allowedDiff is a difference between flanneld and weftd that is known and listed,
// with its reason, in docs/compatibility.md under its id.
type allowedDiff struct {
	id     string
	cases  string // regexp over case names
	item   string // regexp over compatView items
	reason string
}

// udpCases are the cases whose backend is udp (flannel0).
const udpCases = `udp.*|ip-masq-udp-not-random|iface-by-ip`

// compatAllowed is every difference the suite accepts, the first match wins. A
// difference not here fails the test; so does an entry that no case shows any more.
// docs/compatibility.md lists the same entries by id.
var compatAllowed = []allowedDiff{
	{id: "lease-host-id", cases: `.*`, item: `lease\.WeftHostID`,
		reason: "weftd stores a host identity in its lease to catch two hosts with one PublicIP; flanneld ignores the field"},
	{id: "lease-backend-type", cases: udpCases + `|alloc`, item: `lease\.BackendType`,
		reason: "weftd names udp and alloc in BackendType, which flanneld leaves out of both; an empty type still reads as udp"},
	{id: "udp-mtu-option", cases: `udp-port-mtu`, item: `dev flannel0|subnet\.env`,
		reason: "flanneld's udp backend ignores MTU; weftd's takes it for flannel0 and FLANNEL_MTU"},
	{id: "tun-multiqueue", cases: udpCases, item: `dev flannel0`,
		reason: "weftd opens flannel0 multi-queue with a virtio-net header (one queue per worker, offloads); flanneld's C proxy opens one plain queue"},
	{id: "vxlan-local", cases: `public-ip`, item: `dev flannel\.1`,
		reason: "with --public-ip, flanneld gives flannel.1 the public IP as local address, weftd the interface's (what a NAT in front expects)"},
	{id: "nft-rules", cases: `nftables-ip-masq(-dual-stack)?`, item: `nft ruleset`,
		reason: "with EnableNFTables flanneld's masquerade rules differ from its iptables ones (a return for sources outside our subnet, the kube-proxy mark compared whole) and it adds an empty ip6 table; weftd's nftables rules mean what its iptables rules mean"},
	{id: "ipv6-only-mtu", cases: `vxlan-ipv6-only`, item: `subnet\.env`,
		reason: "on an IPv6-only vxlan network weftd writes flannel-v6's MTU (the underlay's - 70) as FLANNEL_MTU, flanneld flannel.1's (- 50), which the IPv6 device cannot carry"},
	{id: "bad-config-exits", cases: `bad-(not-json|no-network|subnetlen-31|two-subnets|min-outside)`, item: `exit`,
		reason: "on a bad network config flanneld logs and retries for ever; weftd names the field and exits with status 1"},
	{id: "strict-options", cases: `unknown-vxlan-option`, item: `.*`,
		reason: "flanneld ignores an unknown Backend option; weftd refuses it by name (a typo would otherwise go unnoticed)"},
}

// side is one of the two labs: the same topology, one daemon binary.
type side struct {
	name string
	lab  *lab.Lab
	bin  string
	weft bool
	cli  *clientv3.Client
}

// TestCompatWithFlanneld runs every compatCase on two identical labs, one with the
// upstream flanneld, one with weftd (same host addresses, same etcd prefix in each
// lab's own etcd, one fresh host per case), and compares what a user can see. Cases
// run in parallel; each side's host i has the same address.
func TestCompatWithFlanneld(t *testing.T) {
	testenv.SkipShort(t, "two namespace labs")
	sides := []*side{
		{name: "flanneld", bin: flanneldBin(t)},
		{name: "weftd", bin: weftd(t), weft: true},
	}
	testenv.NeedTools(t, "iptables-save", "bridge", "nft")
	var wg sync.WaitGroup
	errs := make([]error, len(sides))
	for i, s := range sides {
		s.lab = labtest.New(t, lab.Spec{Prefix: "wc" + s.name[:1]})
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.addHosts(t)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]map[string]bool{} // allowed id -> cases where seen
	var mu sync.Mutex
	sem := make(chan struct{}, 4)
	t.Run("cases", func(t *testing.T) {
		for i, c := range compatCases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				sem <- struct{}{}
				defer func() { <-sem }()
				snaps := make([]compatView, len(sides))
				errs := make([]error, len(sides))
				var wg sync.WaitGroup
				for j, s := range sides {
					wg.Add(1)
					go func() {
						defer wg.Done()
						snaps[j], errs[j] = s.run(t, i, c)
					}()
				}
				wg.Wait()
				for j, err := range errs {
					if err != nil {
						t.Fatalf("%s: %v", sides[j].name, err)
					}
				}
				for j, s := range sides {
					t.Logf("%s:\n%s", s.name, dump(snaps[j]))
				}
				for _, d := range diff(snaps[0], snaps[1]) {
					a := allowedFor(c.name, d.item)
					if a == nil {
						t.Errorf("%s differs (not in compatAllowed):\n  flanneld: %s\n  weftd:    %s", d.item,
							indent(d.a), indent(d.b))
						continue
					}
					mu.Lock()
					if seen[a.id] == nil {
						seen[a.id] = map[string]bool{}
					}
					seen[a.id][c.name] = true
					mu.Unlock()
					t.Logf("%s differs as allowed (%s: %s)", d.item, a.id, a.reason)
				}
			})
		}
	})
	if t.Failed() || testing.Short() {
		return
	}
	for _, a := range compatAllowed {
		if len(seen[a.id]) == 0 {
			t.Errorf("compatAllowed %s (%s) matched no difference: remove it here and in docs/compatibility.md", a.id, a.reason)
		}
	}
}

// TestCompatPageListsAllowed: the table of allowed differences in
// docs/compatibility.md has a row for each entry of compatAllowed and
// kubeCompatAllowed, and no other; its tables of cases have a row for each case of
// both suites.
func TestCompatPageListsAllowed(t *testing.T) {
	page, err := os.ReadFile("../docs/compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "## Differences the suite allows")
	if !ok {
		t.Fatal("docs/compatibility.md has no section \"Differences the suite allows\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\|").FindAllStringSubmatch(section, -1) {
		rows[m[1]] = true
	}
	ids := map[string]bool{}
	for _, a := range append(append([]allowedDiff(nil), compatAllowed...), kubeCompatAllowed...) {
		ids[a.id] = true
		if !rows[a.id] {
			t.Errorf("docs/compatibility.md has no row for `%s` (%s)", a.id, a.reason)
		}
		if _, err := regexp.Compile(a.cases); err != nil {
			t.Errorf("%s: cases: %v", a.id, err)
		}
		if _, err := regexp.Compile(a.item); err != nil {
			t.Errorf("%s: item: %v", a.id, err)
		}
	}
	for id := range rows {
		if !ids[id] {
			t.Errorf("docs/compatibility.md lists `%s`, which compatAllowed does not", id)
		}
	}
	if len(rows) == 0 {
		t.Error("docs/compatibility.md lists no allowed difference")
	}
	names := []string{}
	for _, c := range compatCases {
		names = append(names, c.name)
	}
	for _, c := range kubeCompatCases {
		names = append(names, c.name)
	}
	for _, name := range names {
		if !strings.Contains(string(page), "| `"+name+"` |") {
			t.Errorf("docs/compatibility.md's tables of cases have no row for %s", name)
		}
	}
}

func allowedFor(caseName, item string) *allowedDiff { return allowedIn(compatAllowed, caseName, item) }

// allowedIn is the first entry of list that allows item to differ in the case named
// caseName, or nil.
func allowedIn(list []allowedDiff, caseName, item string) *allowedDiff {
	for i, a := range list {
		if regexp.MustCompile(`^(`+a.cases+`)$`).MatchString(caseName) &&
			regexp.MustCompile(`^(`+a.item+`)$`).MatchString(item) {
			return &list[i]
		}
	}
	return nil
}

type itemDiff struct{ item, a, b string }

func diff(a, b compatView) []itemDiff {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []itemDiff
	for k := range keys {
		va, ok := a[k]
		if !ok {
			va = absent
		}
		vb, ok := b[k]
		if !ok {
			vb = absent
		}
		if va != vb {
			out = append(out, itemDiff{k, va, vb})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].item < out[j].item })
	return out
}

func dump(s compatView) string {
	var b strings.Builder
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %s\n", k, indent(s[k]))
	}
	return b.String()
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n            ") }

// addHosts makes one host per case, in case order, so host i has the same address
// in both labs, and connects to the lab's etcd.
func (s *side) addHosts(t *testing.T) error {
	ctx := context.Background()
	for i, c := range compatCases {
		h, err := s.lab.AddHost(ctx, lab.HostSpec{Name: fmt.Sprintf("c%d", i)})
		if err != nil {
			return err
		}
		if out, err := h.NS.Run(ctx, "ip", "-6", "addr", "add", hostIPv6(i)+"/64", "dev", "eth0", "nodad"); err != nil {
			return fmt.Errorf("%s: %w: %s", h.Name, err, out)
		}
		if c.ext1 {
			if err := netnstest.AddUplink(t, h.NS, "ext1", "198.51.100.200/24"); err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		}
	}
	router, etcd := s.lab.Router(), s.lab.Etcd()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{etcd.Endpoint()},
		DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return router.DialContext(ctx, "tcp", addr)
		})},
	})
	if err != nil {
		return err
	}
	t.Cleanup(func() { cli.Close() })
	s.cli = cli
	return nil
}

// run starts the side's daemon for case i on host c<i>, waits for what it makes to
// settle, and returns the compatView (with a restart's, for restart cases).
func (s *side) run(t *testing.T, i int, c compatCase) (compatView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := s.lab.Host(fmt.Sprintf("c%d", i))
	prefix := fmt.Sprintf("/compat/%s", c.name)
	if _, err := s.cli.Put(ctx, prefix+"/config", c.config); err != nil {
		return nil, err
	}
	var peer netip.Prefix
	if cfg, err := lease.ParseConfig([]byte(c.config)); err == nil && c.peerLeases() {
		peer = cfg.Subnet(cfg.Count() - 1)
		if err := s.putPeer(ctx, prefix, peer, cfg); err != nil {
			return nil, err
		}
	}
	spec := lab.DaemonSpec{Binary: s.bin, Weft: s.weft, NoIface: c.noIface, Env: c.env,
		Args: append([]string{"--etcd-prefix=" + prefix}, c.args...)}
	d, err := s.lab.Start(ctx, h, spec)
	if err != nil {
		return nil, err
	}
	defer d.Stop()
	if c.bad {
		return s.refusal(ctx, d)
	}
	firstEnv, err := d.WaitSubnetEnv(ctx, 30*time.Second)
	if err != nil {
		if exited, _ := d.Exited(); exited {
			return s.refusal(ctx, d) // refused what the other may take
		}
		return nil, err
	}
	snap, err := s.settle(ctx, d, prefix, peer, c)
	if err != nil {
		return nil, err
	}
	if err := d.Stop(); err != nil {
		return nil, err
	}
	_, exitErr := d.Exited()
	snap["exit on SIGTERM"] = daemonExit(exitErr)
	if !c.restart {
		return snap, nil
	}
	macBefore, err := vxlanMAC(ctx, h)
	if err != nil {
		return nil, err
	}
	// Restart: the same host and directory, subnet.env removed so that its return
	// shows the new daemon is up.
	if err := os.Remove(d.SubnetFile()); err != nil {
		return nil, err
	}
	d2, err := s.lab.Start(ctx, h, spec)
	if err != nil {
		return nil, err
	}
	defer d2.Stop()
	if _, err := d2.WaitSubnetEnv(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	again, err := s.settle(ctx, d2, prefix, peer, c)
	if err != nil {
		return nil, err
	}
	for k, v := range again {
		if snap[k] != v {
			snap["after restart: "+k] = v
		}
	}
	macAfter, err := vxlanMAC(ctx, h)
	if err != nil {
		return nil, err
	}
	snap["restart keeps the vxlan MAC"] = fmt.Sprint(macBefore == macAfter)
	env2, err := lease.ReadSubnetEnv(d2.SubnetFile())
	if err != nil {
		return nil, err
	}
	snap["restart keeps the subnet"] = fmt.Sprint(env2.Subnet == firstEnv.Subnet && env2.IPv6Subnet == firstEnv.IPv6Subnet)
	return snap, nil
}

// putPeer writes a peer's lease, with an etcd lease of its own as flanneld needs,
// in the form each backend's leases take.
func (s *side) putPeer(ctx context.Context, prefix string, peer netip.Prefix, cfg *lease.Config) error {
	val := map[string]any{"PublicIP": peerIP, "PublicIPv6": nil}
	switch strings.ToLower(cfg.BackendType) {
	case "vxlan":
		var o struct{ VNI *int }
		_ = json.Unmarshal(cfg.Backend, &o)
		vni := 1
		if o.VNI != nil {
			vni = *o.VNI
		}
		val["BackendType"] = "vxlan"
		val["BackendData"] = map[string]any{"VNI": vni, "VtepMAC": "0e:00:00:00:02:fa"}
	case "host-gw":
		val["BackendType"] = "host-gw"
	}
	var peer6 netip.Prefix
	if cfg.EnableIPv6 {
		peer6 = netip.PrefixFrom(cfg.IPv6SubnetMax, cfg.IPv6SubnetLen)
		val["PublicIPv6"] = peerIPv6
		if bd, ok := val["BackendData"].(map[string]any); ok {
			val["BackendV6Data"] = map[string]any{"VNI": bd["VNI"], "VtepMAC": "0e:00:00:00:06:fa"}
		}
	}
	b, _ := json.Marshal(val)
	grant, err := s.cli.Grant(ctx, 3600)
	if err != nil {
		return err
	}
	_, err = s.cli.Put(ctx, prefix+"/subnets/"+lease.LeaseKey(peer, peer6), string(b), clientv3.WithLease(grant.ID))
	return err
}

// refusal waits up to 10 s for the daemon to exit or write a subnet.env.
func (s *side) refusal(ctx context.Context, d *lab.Daemon) (compatView, error) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if exited, _ := d.Exited(); exited {
			break
		}
		if _, err := os.Stat(d.SubnetFile()); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	snap := compatView{}
	_, err := os.Stat(d.SubnetFile())
	snap["refused (no subnet.env)"] = fmt.Sprint(err != nil)
	if exited, exitErr := d.Exited(); exited {
		snap["exit"] = daemonExit(exitErr)
	} else {
		snap["exit"] = "still running after 10 s"
	}
	return snap, nil
}

var exitStatus = regexp.MustCompile(`(exit status \d+|signal: \w+)`)

func daemonExit(err error) string {
	if err == nil {
		return "running"
	}
	if m := exitStatus.FindString(err.Error()); m != "" {
		return m
	}
	return "exit status 0"
}

// settle takes snapshots until the host shows what the case must show (subnet.env,
// the peer's route) and three in a row agree, at most 30 s.
func (s *side) settle(ctx context.Context, d *lab.Daemon, prefix string, peer netip.Prefix, c compatCase) (compatView, error) {
	var last compatView
	same := 0
	deadline := time.Now().Add(30 * time.Second)
	for {
		env, err := lease.ReadSubnetEnv(d.SubnetFile())
		if err != nil {
			return nil, err
		}
		key := prefix + "/subnets/" + lease.LeaseKey(env.Subnet.Masked(), env.IPv6Subnet.Masked())
		r, err := s.cli.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		val := ""
		if len(r.Kvs) == 1 {
			val = string(r.Kvs[0].Value)
		}
		snap, err := hostView(ctx, d.Host.NS, d.SubnetFile(), key, val)
		if err != nil {
			return nil, err
		}
		if exited, exitErr := d.Exited(); exited {
			return nil, fmt.Errorf("daemon exited: %v\n%s", exitErr, d.LogTail(20))
		}
		ready := val != "" && (!c.peerRoute() || !peer.IsValid() || strings.Contains(snap["routes"], peer.String())) &&
			!dadPending(snap)
		if ready && last != nil && equalSnap(snap, last) {
			same++
		} else {
			same = 0
		}
		last = snap
		if same >= 2 {
			return snap, nil
		}
		if time.Now().After(deadline) {
			if !ready {
				return nil, fmt.Errorf("not ready after 30 s (lease %q, routes %s)\n%s", val, snap["routes"], d.LogTail(20))
			}
			return nil, fmt.Errorf("still changing after 30 s\n%s", d.LogTail(20))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(400 * time.Millisecond):
		}
	}
}

// vxlanMAC names the MACs of the host's flannel.N and flannel-v6.N devices ("" without
// either).
func vxlanMAC(ctx context.Context, h *lab.Host) (string, error) {
	links, err := linkList(ctx, h.NS)
	if err != nil {
		return "", err
	}
	var macs []string
	for _, l := range links {
		if l.Kind == "vxlan" && strings.HasPrefix(l.Name, "flannel") {
			macs = append(macs, l.Name+"="+l.Address)
		}
	}
	sort.Strings(macs)
	return strings.Join(macs, " "), nil
}

func equalSnap(a, b compatView) bool { return len(diff(a, b)) == 0 }

// dadPending reports whether an IPv6 address of a flannel device is still tentative
// (duplicate address detection takes a second or two after it is added).
func dadPending(snap compatView) bool {
	for k, v := range snap {
		if strings.HasPrefix(k, "addr6 ") && strings.Contains(v, "tentative") {
			return true
		}
	}
	return false
}
