package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/checkconfig"
	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/encap/factory"
	"github.com/weftnet/weft/lease"
)

// checkCases are net-conf.json inputs, flannel's own examples among them, with
// check-config's exit status and words its output must hold.
var checkCases = []struct {
	name string
	conf string
	args []string // more flags
	code int
	want []string
}{
	// flannel's Documentation/backends.md and kube-flannel.yml
	{"kube-flannel default", `{"Network":"198.18.0.0/16","EnableNFTables":false,"Backend":{"Type":"vxlan"}}`, nil, 0,
		[]string{"Network 198.18.0.0/16: subnets of /24 from 198.18.1.0 to 198.18.255.0 (255 subnets)", "backend vxlan:",
			"flannel.1: VXLAN device, VNI 1, UDP port 8472, MTU 1450", "[vxlan-local]", "[lease-host-id]", "accepted"}},
	{"vxlan VNI Port DirectRouting", `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789,"DirectRouting":true}}`, nil, 0,
		[]string{"flannel.4096: VXLAN device, VNI 4096, UDP port 4789", "DirectRouting true (peers on our own L2 segment"}},
	{"vxlan lower case", `{"network":"198.18.0.0/16","backend":{"type":"vxlan","vni":2,"gbp":true}}`, nil, 0,
		[]string{"flannel.2", "GBP true"}},
	{"vxlan MTU", `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan","MTU":1450}}`, nil, 0,
		[]string{"MTU 1400 (the Backend's MTU 1450 less 50)"}},
	{"vxlan MacPrefix", `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan","MacPrefix":"0E-2A"}}`, nil, 0,
		[]string{`MacPrefix "0E-2A" is ignored`}},
	{"vxlan MTU too small", `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan","MTU":100}}`, nil, 1,
		[]string{"refused: bad backend option: vxlan MTU 100 is below 118"}},
	{"vxlan VNI string", `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan","VNI":"x"}}`, nil, 1,
		[]string{"refused: bad backend option: vxlan backend: VNI: \"x\" is not an integer"}},
	{"vxlan misspelt option", `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan","DirectRuoting":true}}`, nil, 1,
		[]string{`has no option "DirectRuoting"`, "[strict-options] flanneld silently ignores"}},
	{"vxlan unknown option", `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan","Bogus":1}}`, nil, 1,
		[]string{`has no option "Bogus"`, "[strict-options]"}},
	{"host-gw", `{"Network":"198.18.0.0/16","Backend":{"Type":"host-gw"}}`, nil, 0,
		[]string{"backend host-gw:", "a route to each peer's subnet via its public address"}},
	{"host-gw option", `{"Network":"198.18.0.0/16","Backend":{"Type":"host-gw","DirectRouting":true}}`, nil, 1,
		[]string{`host-gw backend has no option "DirectRouting" (its options: none)`, "[strict-options]"}},
	{"udp", `{"Network":"198.18.0.0/16","Backend":{"Type":"udp","Port":8300}}`, nil, 0,
		[]string{"flannel0: a TUN device carrying the overlay in UDP datagrams on port 8300, MTU 1472 (the 1500-byte underlay's less 28",
			"[lease-backend-type]", "[tun-multiqueue]"}},
	{"no Backend is udp", `{"Network":"198.18.0.0/16"}`, nil, 0, []string{"backend udp:", "port 8285"}},
	{"udp MTU and weft options", `{"Network":"198.18.0.0/16","Backend":{"Type":"udp","MTU":1400,"Workers":1,"BusyPoll":"10ms"}}`, nil, 0,
		[]string{"MTU 1400 (the Backend's MTU", "1 workers (one queue", "busy polling 10ms", "[udp-mtu-option]", "[`BusyPoll` and `Workers`]"}},
	{"udp too many workers", `{"Network":"198.18.0.0/16","Backend":{"Type":"udp","Workers":9}}`, nil, 1,
		[]string{"Workers 9 is not in 1-8"}},
	{"udp table too big", `{"Network":"198.0.0.0/8","SubnetLen":30,"Backend":{"Type":"udp"}}`, nil, 1,
		[]string{"refused: udp backend:", "at most 2^20 subnets"}},
	{"vxlan takes the big network", `{"Network":"198.0.0.0/8","SubnetLen":30,"Backend":{"Type":"vxlan"}}`, nil, 0,
		[]string{"(4194303 subnets)", "accepted"}},
	{"wireguard", `{"Network":"198.18.0.0/16","Backend":{"Type":"wireguard","PersistentKeepaliveInterval":25,"PSK":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}}`, nil, 0,
		[]string{"flannel-wg (IPv4, UDP port 51820); MTU 1420 (the 1500-byte underlay's less 80), a PSK, persistent keepalive 25 s",
			"[The wireguard backend]", "[Sites] weftd opens UDP 51822"}},
	{"wireguard Mode auto dual stack", `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"wireguard","Mode":"auto"}}`, nil, 0,
		[]string{"flannel-wg (Mode auto: one device for both families", "in the one-device Modes"}},
	{"wireguard bad Mode", `{"Network":"198.18.0.0/16","Backend":{"Type":"wireguard","Mode":"both"}}`, nil, 1,
		[]string{`Mode "both" is not separate, auto, ipv4 or ipv6`}},
	{"wireguard bad PSK", `{"Network":"198.18.0.0/16","Backend":{"Type":"wireguard","PSK":"nope"}}`, nil, 1,
		[]string{"wireguard backend: PSK:"}},
	{"wireguard keepalive string", `{"Network":"198.18.0.0/16","Backend":{"Type":"wireguard","PersistentKeepaliveInterval":"25s"}}`, nil, 1,
		[]string{"PersistentKeepaliveInterval"}},
	{"ipip", `{"Network":"198.18.0.0/16","Backend":{"Type":"ipip"}}`, nil, 1,
		[]string{"refused: unknown backend type \"ipip\": weft has no ipip backend", "[`ipip` and `ipsec` stay refused] flanneld runs the ipip backend"}},
	{"ipsec", `{"Network":"198.18.0.0/16","Backend":{"Type":"ipsec","PSK":"x"}}`, nil, 1,
		[]string{"charon", "flanneld runs the ipsec backend"}},
	{"unknown backend", `{"Network":"198.18.0.0/16","Backend":{"Type":"bogus"}}`, nil, 1,
		[]string{`unknown backend type "bogus": weft has udp, vxlan, host-gw, wireguard, alloc and extension`}},
	{"extension", `{"Network":"198.18.0.0/16","Backend":{"Type":"extension","PreStartupCommand":"ip link show","SubnetAddCommand":"ip route add $SUBNET via $PUBLIC_IP"}}`, nil, 0,
		[]string{`PreStartupCommand: runs "ip"`, "PostStartupCommand: none", "[The extension backend]"}},
	{"extension blank command", `{"Network":"198.18.0.0/16","Backend":{"Type":"extension","PostStartupCommand":"   "}}`, nil, 1,
		[]string{"PostStartupCommand \"   \" names no program"}},
	{"alloc", `{"Network":"198.18.0.0/16","Backend":{"Type":"alloc"}}`, nil, 0, []string{"no data path", "[lease-backend-type]"}},
	{"alloc option", `{"Network":"198.18.0.0/16","Backend":{"Type":"alloc","Port":1}}`, nil, 1, []string{`alloc backend has no option "Port"`}},
	{"not JSON", `{"Network":`, nil, 1, []string{"refused: bad network config: not a JSON object", "[bad-config-exits]"}},
	{"no Network", `{"Backend":{"Type":"vxlan"}}`, nil, 1, []string{"refused: bad network config: Network: missing"}},
	{"Network host bits", `{"Network":"198.18.0.1/16"}`, nil, 1, []string{"did you mean 198.18.0.0/16?"}},
	{"Network not a prefix", `{"Network":"198.18.0.0"}`, nil, 1, []string{`Network: "198.18.0.0" is not an IPv4 prefix`}},
	{"SubnetLen 31", `{"Network":"198.18.0.0/16","SubnetLen":31}`, nil, 1, []string{"SubnetLen: /31 is longer than /30"}},
	{"SubnetMin outside", `{"Network":"198.18.0.0/16","SubnetMin":"198.19.0.0"}`, nil, 1, []string{"SubnetMin: 198.19.0.0 is outside"}},
	{"Backend not an object", `{"Network":"198.18.0.0/16","Backend":[]}`, nil, 1, []string{"Backend: not a JSON object"}},
	{"dual stack vxlan", `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"vxlan"}}`, nil, 0,
		[]string{"IPv6Network fd00:db8::/48: subnets of /64 from fd00:db8:0:1::/64 to fd00:db8:0:ffff::/64",
			"flannel-v6.1: VXLAN device over IPv6", "[Choosing the IPv6 subnet]", "[Interface addresses]"}},
	{"IPv6-only vxlan", `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"vxlan"}}`, nil, 0,
		[]string{"no IPv4 network (EnableIPv4 false)", "[ipv6-only-mtu]", "[IPv6-only networks in etcd mode]"}},
	{"IPv6 without IPv6Network", `{"Network":"198.18.0.0/16","EnableIPv6":true}`, nil, 1, []string{"IPv6Network: missing"}},
	{"no family", `{"EnableIPv4":false}`, nil, 1, []string{"EnableIPv4: false, and EnableIPv6 is not true"}},
	{"udp dual stack", `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/48"}`, nil, 0,
		[]string{"MTU 1452 (the 1500-byte underlay's less 48", "[IPv6 and dual stack]"}},
	{"nftables", `{"Network":"198.18.0.0/16","EnableNFTables":true,"Backend":{"Type":"host-gw"}}`, nil, 0,
		[]string{"firewall: nftables, table ip weft", "[nft-rules]"}},
	{"Kubernetes mode", `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"vxlan"}}`, []string{"--kube-subnet-mgr"}, 0,
		[]string{"Kubernetes mode: our subnet is our node's podCIDR", "[kube-waits-for-podcidr]", "[kube-stale-peer-removed]",
			"[a peer node missing one family's annotations]"}},
	{"underlay MTU", `{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan"}}`, []string{"--underlay-mtu=9000"}, 0,
		[]string{"MTU 8950 (the 9000-byte underlay's less 50)"}},
}

// TestCheckConfig runs check-config on each case, from standard input and from a
// file: the exit status, the words, and nothing on stderr.
func TestCheckConfig(t *testing.T) {
	for _, c := range checkCases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "net-conf.json")
			if err := os.WriteFile(path, []byte(c.conf), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, src := range [][]string{{"--file", "-"}, {"--file=" + path}} {
				var stdout, stderr bytes.Buffer
				code := checkConfig(append(src, c.args...), func(string) string { return "" }, strings.NewReader(c.conf), &stdout, &stderr)
				if code != c.code {
					t.Errorf("%v: exit %d, want %d\n%s%s", src, code, c.code, &stdout, &stderr)
				}
				for _, w := range c.want {
					if !strings.Contains(stdout.String(), w) {
						t.Errorf("%v: output lacks %q:\n%s", src, w, &stdout)
					}
				}
				if stderr.Len() > 0 {
					t.Errorf("%v: stderr %q", src, &stderr)
				}
				verdict := "\naccepted: weftd would run this config\n"
				if c.code == 1 {
					verdict = "weftd would stop at start with status 1 and write no subnet.env\n"
				}
				if !strings.HasSuffix(stdout.String(), verdict) {
					t.Errorf("%v: output does not end with %q:\n%s", src, verdict, &stdout)
				}
			}
		})
	}
}

// TestCheckConfigIsStart: check-config's verdict is weftd's own at start for every case:
// the error of lease.ParseConfig and then of factory.New, the constructor weftd runs,
// word for word (New gets an interface with an IPv6 address, and a key file of the
// test's, as a host would give it).
func TestCheckConfigIsStart(t *testing.T) {
	ext := encap.ExternalInterface{Name: "eth0", MTU: 1500, IfaceIP: netip.MustParseAddr("192.0.2.10"),
		IfaceIPv6: netip.MustParseAddr("2001:db8::10"), PublicIP: netip.MustParseAddr("192.0.2.10"), PublicIPv6: netip.MustParseAddr("2001:db8::10")}
	for _, c := range checkCases {
		if len(c.args) > 0 {
			continue // flags that change the host, not the config
		}
		t.Run(c.name, func(t *testing.T) {
			v := checkconfig.Check([]byte(c.conf), checkconfig.Input{UnderlayMTU: ext.MTU})
			want := ""
			cfg, err := lease.ParseConfig([]byte(c.conf))
			if err == nil {
				tuning := factory.Tuning{}
				tuning.WireGuard.KeyFile = filepath.Join(t.TempDir(), "wgkey")
				var be encap.Backend
				be, err = factory.New(cfg, ext, tuning, zap.NewNop())
				if err == nil {
					be.Close()
				}
			}
			if err != nil {
				want = err.Error()
			}
			got := ""
			if v.Err != nil {
				got = v.Err.Error()
			}
			if got != want {
				t.Errorf("check-config says %q; weftd's start says %q", got, want)
			}
		})
	}
}

// TestCheckConfigDiffsDocumented: every difference check-config names is in
// docs/compatibility.md under the same words (an id of its tables in backticks, or a
// heading or a list item's words).
func TestCheckConfigDiffsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	diff := regexp.MustCompile(`(?m)^  - \[([^\]]+)\] `)
	seen := map[string]bool{}
	for _, c := range checkCases {
		var stdout bytes.Buffer
		checkConfig(append([]string{"--file", "-"}, c.args...), func(string) string { return "" }, strings.NewReader(c.conf), &stdout, &bytes.Buffer{})
		for _, m := range diff.FindAllStringSubmatch(stdout.String(), -1) {
			seen[m[1]] = true
		}
	}
	if len(seen) < 20 {
		t.Errorf("the cases show only %d differences: %v", len(seen), seen)
	}
	for d := range seen {
		if !strings.Contains(string(doc), d) {
			t.Errorf("check-config names the difference %q, which docs/compatibility.md does not", d)
		}
		if regexp.MustCompile(`^[a-z0-9-]+$`).MatchString(d) && !strings.Contains(string(doc), "| `"+d+"` |") {
			t.Errorf("%q is no id of docs/compatibility.md's tables", d)
		}
	}
}

// TestCheckConfigUsage: usage errors and unreadable configs exit 2, with the reason on
// stderr; FLANNELD_* variables are read as the flags.
func TestCheckConfigUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		code int
		want string // in stderr, or in stdout for code 0
	}{
		{[]string{"--help"}, nil, 0, ""},
		{[]string{"--file=x", "--kube-configmap=a/b"}, nil, 2, "--file and --kube-configmap: give one source"},
		{[]string{"--kube-configmap=kube-flannel"}, nil, 2, "want NAMESPACE/NAME"},
		{[]string{"--file=/nonexistent/net-conf.json"}, nil, 2, "no such file"},
		{[]string{"--file=-", "more"}, nil, 2, `unexpected argument "more"`},
		{[]string{"--underlay-mtu=10"}, nil, 2, "--underlay-mtu=10: not in 68-65535"},
		{[]string{"--file=-"}, map[string]string{"WEFT_WG_DEVICE": "bogus"}, 2, "WEFT_WG_DEVICE"},
		{[]string{"--file=-"}, map[string]string{"FLANNELD_UNDERLAY_MTU": "9000"}, 0, "MTU 8950"},
		{[]string{"--file=-"}, map[string]string{"FLANNELD_KUBE_SUBNET_MGR": "true"}, 0, "Kubernetes mode"},
		{[]string{"--etcd-endpoints=http://127.0.0.1:1", "--etcd-api=v4"}, nil, 2, `bad etcd options: API "v4"`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			env := func(k string) string { return c.env[k] }
			code := checkConfig(c.args, env, strings.NewReader(`{"Network":"198.18.0.0/16","Backend":{"Type":"vxlan"}}`), &stdout, &stderr)
			if code != c.code {
				t.Errorf("exit %d, want %d\n%s%s", code, c.code, &stdout, &stderr)
			}
			out := stderr.String()
			if c.code == 0 {
				out = stdout.String()
			}
			if !strings.Contains(out, c.want) {
				t.Errorf("output lacks %q:\n%s", c.want, out)
			}
		})
	}
}

// TestCheckDaemonSet reads the upstream kube-flannel.yml (v0.28.x, from flanneld's
// module as make flanneld fetches it) with a user's customisations, through weftd's
// own flag parser: what weft's manifest keeps, what to carry and where, what weftd
// refuses.
func TestCheckDaemonSet(t *testing.T) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/flannel-io/flannel")
	cmd.Dir = filepath.Join("..", "..", "test", "flannel")
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	testenv.Need(t, err == nil && dir != "", fmt.Sprintf("flanneld's module (make flanneld): %v", err))
	f, err := os.Open(filepath.Join(dir, "Documentation", "kube-flannel.yml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ds, err := checkconfig.ReadDaemonSet(f)
	if err != nil {
		t.Fatal(err)
	}
	// The user's own: an interface, a public IP from a variable, a flag weftd does not
	// know, a bad value, a toleration for every taint, a node selector, more memory.
	spec := &ds.Spec.Template.Spec
	c := &spec.Containers[0]
	c.Args = append(c.Args, "--iface=eth1", "--no-such-flag", "--iptables-resync=0")
	c.Env = append(c.Env, corev1.EnvVar{Name: "FLANNELD_PUBLIC_IP", Value: "192.0.2.7"}, corev1.EnvVar{Name: "FLANNELD_ETCD_API", Value: "v9"})
	spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
	spec.NodeSelector = map[string]string{"network": "flannel"}
	c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("300Mi")}

	settings, err := checkconfig.FromDaemonSet(ds, weftdTakes)
	if err != nil {
		t.Fatal(err)
	}
	fate := map[string]string{}
	for _, s := range settings {
		fate[s.Kind+" "+s.Value] = s.Fate
		if s.Fate == checkconfig.Carry && s.Where == "" || s.Fate == checkconfig.Refused && s.Why == "" {
			t.Errorf("%+v: a carry without where, or a refusal without why", s)
		}
	}
	for k, want := range map[string]string{
		"arg --ip-masq": "kept", "arg --kube-subnet-mgr": "kept", "arg --healthz-port=8081": "kept",
		"env EVENT_QUEUE_DEPTH=5000": "kept", "env POD_NAME=(from the pod or a reference)": "kept",
		"arg --iface=eth1": "carry", "env FLANNELD_PUBLIC_IP=192.0.2.7": "carry",
		"arg --no-such-flag": "refused", "arg --iptables-resync=0": "refused", "env FLANNELD_ETCD_API=v9": "refused",
		"toleration operator=Exists effect=NoSchedule": "kept", "toleration operator=Exists effect=NoExecute": "carry",
		"nodeSelector network=flannel": "carry",
	} {
		if fate[k] != want {
			t.Errorf("%s: %q, want %q", k, fate[k], want)
		}
	}
	if !slices.ContainsFunc(settings, func(s checkconfig.Setting) bool { return s.Kind == "resources" && s.Fate == checkconfig.Carry }) {
		t.Errorf("resources other than weft's not listed: %+v", settings)
	}
	// The command: the same list, exit 1 for the refusals.
	path := filepath.Join(t.TempDir(), "kube-flannel.yml")
	data, err := yaml.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append([]byte("apiVersion: apps/v1\nkind: DaemonSet\n"), data...), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--daemonset", path, "--kube-daemonset", "kube-flannel/kube-flannel-ds"}, {"--daemonset", path, "--file", path}} {
		var stdout, stderr bytes.Buffer
		if code := checkConfig(args, func(string) string { return "" }, nil, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "give one source") && !strings.Contains(stderr.String(), "leave out") {
			t.Errorf("check-config %q: exit %d, stderr %s; want 2 and the conflict named", args, code, &stderr)
		}
	}
	var stdout, stderr bytes.Buffer
	code := checkConfig([]string{"--daemonset", path}, func(string) string { return "" }, nil, &stdout, &stderr)
	if code != 1 || !strings.Contains(stdout.String(), "--iface=eth1: carry: chart: flannel.args") ||
		!strings.Contains(stdout.String(), "3 settings weftd refuses") {
		t.Errorf("check-config --daemonset: exit %d, stderr %s\n%s", code, &stderr, &stdout)
	}
}
