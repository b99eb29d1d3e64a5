package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
)

// extRecorder is the script every extension case's commands go through: it records
// its first argument (the command's role), the other arguments, the variables the
// backend may set and its stdin; for a role ending in -run it runs the other
// arguments (the command under test, such as the host-gw example's `ip route add`)
// and records their output and exit status, which it exits with. A record is appended to $EXT_LOG in one write
// once complete, so a reader never sees half of one. "pre" prints a line on stdout
// and one on stderr: the lease's BackendData.
const extRecorder = `#!/bin/sh
role=$1
shift
rec="== $role
"
for a in "$@"; do rec="${rec}arg <$a>
"; done
for v in NETWORK SUBNET IPV6SUBNET PUBLIC_IP PUBLIC_IPV6; do
	eval "val=\${$v-unset}"
	rec="${rec}$v=$val
"
done
stdin=$(cat; echo .)
rec="${rec}stdin: <${stdin%.}>
"
status=0
case $role in *-run)
	out=$("$@" 2>&1)
	status=$?
	rec="${rec}ran: <$out> exit $status
"
esac
printf '%s' "$rec" >>"$EXT_LOG"
if [ "$role" = pre ]; then
	echo "  vtep 0e:00:00:00:00:01 <&>"
	echo "pre warning" >&2
fi
exit $status
`

// extCase is one extension backend input for both daemons. In config, {rec} is
// the recording script's path.
type extCase struct {
	name   string
	config string
	args   []string
	bad    bool // both must refuse: no subnet.env
	peers  bool // the peer steps: SubnetAddCommand and SubnetRemoveCommand are recorded
}

const (
	// extNet keeps our subnet below the peers' (198.18.250.0/24 and up).
	extNet   = `"Network":"198.18.0.0/16","SubnetMax":"198.18.200.0"`
	extNet6  = `"EnableIPv6":true,"IPv6Network":"fd00:db8::/48","IPv6SubnetMax":"fd00:db8:0:ff00::"`
	extAll   = `"PreStartupCommand":"{rec} pre one \"two three\" $HOME ${NOPE}x","PostStartupCommand":"{rec} post $SUBNET","SubnetAddCommand":"{rec} add $SUBNET","SubnetRemoveCommand":"{rec} remove ${SUBNET}"`
	extHostG = `"SubnetAddCommand":"{rec} add-run ip route add %s via %s","SubnetRemoveCommand":"{rec} remove-run ip route del %s via %s"`
)

var extCases = []extCase{
	{name: "extension-commands", config: `{` + extNet + `,"Backend":{"Type":"extension",` + extAll + `}}`, peers: true},
	{name: "extension-host-gw-unquoted", peers: true, config: `{` + extNet + `,"Backend":{"Type":"extension",` +
		fmt.Sprintf(extHostG, "$SUBNET", "$PUBLIC_IP", "$SUBNET", "$PUBLIC_IP") + `}}`},
	{name: "extension-host-gw-quoted", peers: true, config: `{` + extNet + `,"Backend":{"Type":"extension",` +
		fmt.Sprintf(extHostG, `\"$SUBNET\"`, `\"$PUBLIC_IP\"`, `\"$SUBNET\"`, `\"$PUBLIC_IP\"`) + `}}`},
	{name: "extension-dual-stack", config: `{` + extNet + `,` + extNet6 + `,"Backend":{"Type":"extension",` + extAll + `}}`, peers: true},
	{name: "extension-public-ip", config: `{` + extNet + `,"Backend":{"Type":"extension",` + extAll + `}}`,
		args: []string{"--public-ip=192.0.2.200"}, peers: true},
	{name: "extension-no-commands", config: `{` + extNet + `,"Backend":{"Type":"extension"}}`},
	{name: "extension-pre-fails", config: `{` + extNet + `,"Backend":{"Type":"extension","PreStartupCommand":"false"}}`, bad: true},
	{name: "extension-post-fails", config: `{` + extNet + `,"Backend":{"Type":"extension","PostStartupCommand":"{rec} post-run false"}}`, bad: true},
}

// TestCompatExtensionWithFlanneld runs the extension backend's cases on two identical
// labs, one with flanneld's extension backend, one with weftd's: the same config (the
// commands go through the same recording script, each side's log named by EXT_LOG in
// the daemon's environment), the same peer leases, and compares the lease
// (BackendData from PreStartupCommand), which commands ran with which arguments,
// environment and stdin, in which order, what the host shows (routes of the host-gw
// example, quoted and not), and how the daemon ended. The peer steps: three leases
// before the start (an extension one, a vxlan one and an extension one whose
// BackendData is not a string, which both skip), then a peer added and removed, then
// a last one whose SubnetAddCommand shows that everything before it has run.
func TestCompatExtensionWithFlanneld(t *testing.T) {
	testenv.SkipShort(t, "two namespace labs")
	testenv.NeedTools(t, "iptables-save", "bridge", "nft", "sh")
	sides := []*side{
		{name: "flanneld", bin: flanneldBin(t)},
		{name: "weftd", bin: weftd(t), weft: true},
	}
	dir := t.TempDir()
	rec := filepath.Join(dir, "rec")
	if err := os.WriteFile(rec, []byte(extRecorder), 0o755); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(sides))
	for i, s := range sides {
		s.lab = labtest.New(t, lab.Spec{Prefix: "wx" + s.name[:1]})
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.addExtHosts(t)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range extCases {
		t.Run(c.name, func(t *testing.T) {
			c.config = strings.ReplaceAll(c.config, "{rec}", rec)
			views := make([]compatView, len(sides))
			var wg sync.WaitGroup
			for j, s := range sides {
				wg.Add(1)
				go func() {
					defer wg.Done()
					views[j], errs[j] = s.runExt(t, i, c, filepath.Join(dir, c.name+"."+s.name+".log"))
				}()
			}
			wg.Wait()
			for j, err := range errs {
				if err != nil {
					t.Fatalf("%s: %v", sides[j].name, err)
				}
			}
			for j, s := range sides {
				t.Logf("%s:\n%s", s.name, dump(views[j]))
			}
			for _, d := range diff(views[0], views[1]) {
				if a := allowedFor(c.name, d.item); a != nil && a.id == "lease-host-id" {
					continue
				}
				t.Errorf("%s differs:\n  flanneld: %s\n  weftd:    %s", d.item, indent(d.a), indent(d.b))
			}
		})
	}
}

// addExtHosts makes host x<i> for each extension case, with an IPv6 underlay
// address, and connects to the lab's etcd.
func (s *side) addExtHosts(t *testing.T) error {
	ctx := context.Background()
	for i := range extCases {
		h, err := s.lab.AddHost(ctx, lab.HostSpec{Name: fmt.Sprintf("x%d", i)})
		if err != nil {
			return err
		}
		if out, err := h.NS.Run(ctx, "ip", "-6", "addr", "add", hostIPv6(i)+"/64", "dev", "eth0", "nodad"); err != nil {
			return fmt.Errorf("%s: %w: %s", h.Name, err, out)
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

// extPeer is a peer lease the extension cases write.
type extPeer struct {
	n           int    // 198.18.(250+n).0/24, fd00:db8:0:fff<n>::/64 on a dual-stack network
	typ, data   string // BackendType, BackendData (JSON, "" for none)
	ip          string // PublicIP
	subnet, sn6 netip.Prefix
}

func (s *side) putExtPeer(ctx context.Context, prefix string, dual bool, p *extPeer) error {
	p.subnet = netip.MustParsePrefix(fmt.Sprintf("198.18.%d.0/24", 250+p.n))
	val := map[string]any{"PublicIP": p.ip, "PublicIPv6": nil, "BackendType": p.typ}
	if p.data != "" {
		val["BackendData"] = json.RawMessage(p.data)
	}
	if dual {
		p.sn6 = netip.MustParsePrefix(fmt.Sprintf("fd00:db8:0:fff%d::/64", p.n))
		val["PublicIPv6"] = fmt.Sprintf("2001:db8:1::f%d", p.n)
	}
	b, err := json.Marshal(val)
	if err != nil {
		return err
	}
	grant, err := s.cli.Grant(ctx, 3600)
	if err != nil {
		return err
	}
	_, err = s.cli.Put(ctx, prefix+"/subnets/"+lease.LeaseKey(p.subnet, p.sn6), string(b), clientv3.WithLease(grant.ID))
	return err
}

// runExt runs case i on host x<i> with its log at logPath and returns what it saw.
func (s *side) runExt(t *testing.T, i int, c extCase, logPath string) (compatView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := s.lab.Host(fmt.Sprintf("x%d", i))
	prefix := "/compat-ext/" + c.name
	if _, err := s.cli.Put(ctx, prefix+"/config", c.config); err != nil {
		return nil, err
	}
	cfg, err := lease.ParseConfig([]byte(c.config))
	if err != nil {
		return nil, err
	}
	dual := cfg.EnableIPv6
	// Before the start: an extension peer on our LAN, a vxlan one (not ours: skipped)
	// and an extension one whose BackendData is not a JSON string (skipped).
	for _, p := range []*extPeer{
		{n: 0, typ: "extension", data: `"peer-a data <&>"`, ip: "192.0.2.250"},
		{n: 1, typ: "vxlan", data: `{"VNI":1,"VtepMAC":"0e:00:00:00:02:fb"}`, ip: "192.0.2.251"},
		{n: 2, typ: "extension", data: `{"VNI":1}`, ip: "192.0.2.252"},
	} {
		if err := s.putExtPeer(ctx, prefix, dual, p); err != nil {
			return nil, err
		}
	}
	spec := lab.DaemonSpec{Binary: s.bin, Weft: s.weft, Env: []string{"EXT_LOG=" + logPath},
		Args: append([]string{"--etcd-prefix=" + prefix}, c.args...)}
	d, err := s.lab.Start(ctx, h, spec)
	if err != nil {
		return nil, err
	}
	defer d.Stop()
	if c.bad {
		v, err := s.refusal(ctx, d)
		if err != nil {
			return nil, err
		}
		// PostStartupCommand ran with the subnet the daemon leased.
		v["commands"] = ownSubnetVar.ReplaceAllString(readExtLog(logPath, normaliser{}), "SUBNET=<own>/24")
		// flanneld leaves the lease it took before PostStartupCommand failed.
		r, err := s.cli.Get(ctx, prefix+"/subnets/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return nil, err
		}
		v["leases in etcd (3 peers)"] = fmt.Sprint(r.Count)
		return v, nil
	}
	env, err := d.WaitSubnetEnv(ctx, 30*time.Second)
	if err != nil {
		return nil, err
	}
	n := normaliser{own: env.Subnet.Masked(), own6: env.IPv6Subnet.Masked()}
	key := prefix + "/subnets/" + lease.LeaseKey(env.Subnet.Masked(), env.IPv6Subnet.Masked())
	view := func(v compatView, tag string) error {
		r, err := s.cli.Get(ctx, key)
		if err != nil {
			return err
		}
		val := ""
		if len(r.Kvs) == 1 {
			val = string(r.Kvs[0].Value)
		}
		hv, err := hostView(ctx, d.Host.NS, d.SubnetFile(), key, val)
		if err != nil {
			return err
		}
		for k, x := range hv {
			if tag == "" || k == "routes" || k == "routes6" {
				v[tag+k] = x
			}
		}
		return nil
	}
	// waitRecords waits until the log holds count records of role (with or without
	// -run), or the daemon exits.
	waitRecords := func(role string, count int) error {
		for {
			if strings.Count(readExtLog(logPath, n), "== "+role) >= count {
				return nil
			}
			if exited, exitErr := d.Exited(); exited {
				return fmt.Errorf("daemon exited: %v\n%s", exitErr, d.LogTail(20))
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for %d %s records: %w\n%s\nlog:\n%s", count, role, ctx.Err(),
					d.LogTail(20), readExtLog(logPath, n))
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	v := compatView{}
	if c.peers {
		if err := waitRecords("add", 1); err != nil {
			return nil, err
		}
		if err := view(v, ""); err != nil {
			return nil, err
		}
		b := &extPeer{n: 3, typ: "extension", data: `"peer-b data"`, ip: "192.0.2.253"}
		if err := s.putExtPeer(ctx, prefix, dual, b); err != nil {
			return nil, err
		}
		if err := waitRecords("add", 2); err != nil {
			return nil, err
		}
		if err := view(v, "peer b added: "); err != nil {
			return nil, err
		}
		if _, err := s.cli.Delete(ctx, prefix+"/subnets/"+lease.LeaseKey(b.subnet, b.sn6)); err != nil {
			return nil, err
		}
		if err := waitRecords("remove", 1); err != nil {
			return nil, err
		}
		if err := view(v, "peer b removed: "); err != nil {
			return nil, err
		}
		// The last peer's add comes after whatever the removal may have set off.
		last := &extPeer{n: 4, typ: "extension", ip: "192.0.2.254"}
		if err := s.putExtPeer(ctx, prefix, dual, last); err != nil {
			return nil, err
		}
		if err := waitRecords("add", 3); err != nil {
			return nil, err
		}
	} else if err := view(v, ""); err != nil {
		return nil, err
	}
	v["commands"] = readExtLog(logPath, n)
	if err := d.Stop(); err != nil {
		return nil, err
	}
	_, exitErr := d.Exited()
	v["exit on SIGTERM"] = daemonExit(exitErr)
	return v, nil
}

var ownSubnetVar = regexp.MustCompile(`(?m)^SUBNET=198\.18\.\d+\.0/24$`)

// readExtLog is the recording script's log, our subnets replaced by placeholders;
// "<none>" when no command ran.
func readExtLog(path string, n normaliser) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return "<none>"
	}
	return n.text(string(b))
}
