package lab_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
	"go.uber.org/zap/zaptest"
)

func ping(t *testing.T, from *netns.NS, to string) {
	t.Helper()
	out, err := from.Run(context.Background(), "ping", "-c1", "-W2", to)
	if err != nil || !strings.Contains(out, "1 received") {
		t.Errorf("ping %s from %s: %v\n%s", to, from.Name, err, out)
	}
}

func TestTopology(t *testing.T) {
	l := labtest.New(t, lab.Spec{Hosts: []lab.HostSpec{{Name: "a"}, {Name: "b"}, {Name: "c", LAN: lab.LAN2}}})
	a, b, c := l.Host("a"), l.Host("b"), l.Host("c")
	want := map[*lab.Host]string{a: "192.0.2.10", b: "192.0.2.11", c: "198.51.100.10"}
	for h, addr := range want {
		if h.Addr.String() != addr {
			t.Errorf("host %s: addr %s, want %s", h.Name, h.Addr, addr)
		}
	}
	ping(t, a.NS, "192.0.2.11")    // same LAN
	ping(t, a.NS, "198.51.100.10") // across the router
	ping(t, c.NS, "192.0.2.1")     // etcd's address
	ping(t, b.NS, "198.51.100.1")

	ctx := context.Background()
	if err := l.SetBackend(ctx, "", "vxlan"); err != nil {
		t.Fatal(err)
	}
	if err := l.Put(ctx, lease.DefaultPrefix+"/subnets/198.18.7.0-24", `{"PublicIP":"192.0.2.10"}`); err != nil {
		t.Fatal(err)
	}
	leases, err := l.Leases(ctx, "")
	if err != nil || leases["198.18.7.0-24"] != `{"PublicIP":"192.0.2.10"}` {
		t.Errorf("leases %v, %v", leases, err)
	}
	// Setting the backend drops old leases.
	if err := l.SetBackend(ctx, "", "udp"); err != nil {
		t.Fatal(err)
	}
	if leases, err := l.Leases(ctx, ""); err != nil || len(leases) != 0 {
		t.Errorf("after SetBackend: leases %v, %v", leases, err)
	}
	// A host can join the built lab, and is reachable at once.
	d, err := l.AddHost(ctx, lab.HostSpec{Name: "d", LAN: lab.LAN2})
	if err != nil {
		t.Fatal(err)
	}
	if d.Addr.String() != "198.51.100.11" || l.Host("d") != d || len(l.Hosts()) != 4 {
		t.Errorf("joined host %s at %s; hosts %d", d.Name, d.Addr, len(l.Hosts()))
	}
	ping(t, d.NS, "192.0.2.10")
	if _, err := l.AddHost(ctx, lab.HostSpec{Name: "d"}); !errors.Is(err, lab.ErrSpec) {
		t.Errorf("second host d: %v, want ErrSpec", err)
	}
	// Delete removes one key.
	if err := l.Put(ctx, "/weft-lab/x", "1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Delete(ctx, "/weft-lab/x"); err != nil {
		t.Fatal(err)
	}
	if err := l.Delete(ctx, "/weft-lab/x"); err != nil {
		t.Errorf("deleting a missing key: %v", err)
	}
	// etcd answers from a host, through its default route.
	out, err := c.NS.Run(ctx, "etcdctl", "--endpoints", lab.EtcdEndpoint, "get", lease.DefaultPrefix+"/config", "--print-value-only")
	if err == nil && !strings.Contains(out, `"Type":"udp"`) {
		t.Errorf("config from host c: %q", out)
	}
}

// TestNoRouter: a lab without router is two hosts on one veth, no etcd, no more hosts.
func TestNoRouter(t *testing.T) {
	l := labtest.New(t, lab.Spec{NoRouter: true, Hosts: []lab.HostSpec{{Name: "a"}, {Name: "b"}}})
	a, b := l.Host("a"), l.Host("b")
	if a.Addr.String() != "192.0.2.10" || b.Addr.String() != "192.0.2.11" || a.Router.IsValid() {
		t.Errorf("hosts at %s and %s, router %v", a.Addr, b.Addr, a.Router)
	}
	ping(t, a.NS, "192.0.2.11")
	ping(t, b.NS, "192.0.2.10")
	if l.Router() != nil || l.Etcd() != nil {
		t.Errorf("router %v, etcd %v; want neither", l.Router(), l.Etcd())
	}
	ctx := context.Background()
	if err := l.SetBackend(ctx, "", "udp"); !errors.Is(err, lab.ErrNoEtcd) {
		t.Errorf("SetBackend without etcd: %v, want ErrNoEtcd", err)
	}
	if _, err := l.AddHost(ctx, lab.HostSpec{Name: "c"}); !errors.Is(err, lab.ErrSpec) {
		t.Errorf("third host: %v, want ErrSpec", err)
	}
	if s := l.State(); len(s.Namespaces) != 2 || s.Router != "" || s.Etcd != "" {
		t.Errorf("state %+v", s)
	}
}

// TestBadSpec: a spec a lab cannot have is refused before any namespace is made (so
// this needs no root) and leaves nothing behind.
func TestBadSpec(t *testing.T) {
	before, _ := filepath.Glob(filepath.Join(os.TempDir(), "weft-lab-*"))
	for _, tc := range []struct {
		name string
		spec lab.Spec
	}{
		{"LAN2 without router", lab.Spec{NoRouter: true, Hosts: []lab.HostSpec{{Name: "a", LAN: lab.LAN2}}}},
		{"unknown LAN", lab.Spec{NoRouter: true, Hosts: []lab.HostSpec{{Name: "a", LAN: "lan3"}}}},
		{"no name", lab.Spec{NoRouter: true, Hosts: []lab.HostSpec{{}}}},
		{"etcd cluster without etcd", lab.Spec{NoEtcd: true, EtcdCluster: true, Hosts: []lab.HostSpec{{Name: "a"}}}},
		{"etcd cluster without router", lab.Spec{NoRouter: true, EtcdCluster: true, Hosts: []lab.HostSpec{{Name: "a"}}}},
		{"TLS etcd without etcd", lab.Spec{NoEtcd: true, EtcdTLS: true}},
		{"etcd cluster without hosts", lab.Spec{EtcdCluster: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := lab.New(context.Background(), tc.spec, zaptest.NewLogger(t))
			if !errors.Is(err, lab.ErrSpec) || l != nil {
				t.Fatalf("New: %v, %v; want ErrSpec", l, err)
			}
		})
	}
	after, _ := filepath.Glob(filepath.Join(os.TempDir(), "weft-lab-*"))
	if len(after) > len(before) {
		t.Errorf("lab directories left: %v (before %v)", after, before)
	}
}

func TestReferenceConfigs(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(*lab.Lab, context.Context, []*lab.Host) ([]lease.SubnetEnv, error)
		mtu  int
	}{
		{"kernel-vxlan", (*lab.Lab).KernelVXLAN, 1450},
		{"kernel-host-gw", (*lab.Lab).KernelHostGW, 1500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := labtest.New(t, lab.Spec{Hosts: []lab.HostSpec{{Name: "a"}, {Name: "b"}}})
			ctx := context.Background()
			hosts := l.Hosts()
			envs, err := tc.make(l, ctx, hosts)
			if err != nil {
				t.Fatal(err)
			}
			var pods []*lab.Pod
			for i, h := range hosts {
				if envs[i].MTU != tc.mtu {
					t.Errorf("%s: MTU %d, want %d", h.Name, envs[i].MTU, tc.mtu)
				}
				p, err := l.AttachPod(ctx, h, envs[i])
				if err != nil {
					t.Fatal(err)
				}
				pods = append(pods, p)
			}
			if got := pods[0].Addr.String(); got != "198.18.1.2" {
				t.Errorf("pod a addr %s, want 198.18.1.2", got)
			}
			ping(t, pods[0].NS, pods[1].Addr.String())
			ping(t, pods[1].NS, pods[0].Addr.String())
		})
	}
}

// TestSocatTunnel: the socat reference joins exactly two hosts, carries pings both
// ways over its TUN devices, and its processes end with the lab.
func TestSocatTunnel(t *testing.T) {
	l := labtest.New(t, lab.Spec{Hosts: []lab.HostSpec{{Name: "a"}, {Name: "b"}, {Name: "c"}}})
	testenv.NeedTools(t, "socat")
	ctx := context.Background()
	hosts := l.Hosts()
	if _, _, err := l.SocatTunnel(ctx, hosts); !errors.Is(err, lab.ErrSocatHosts) {
		t.Fatalf("three hosts: %v, want ErrSocatHosts", err)
	}
	envs, procs, err := l.SocatTunnel(ctx, hosts[:2])
	if err != nil {
		t.Fatal(err)
	}
	var pods []*lab.Pod
	for i, h := range hosts[:2] {
		if envs[i].MTU != 1472 {
			t.Errorf("%s: MTU %d, want 1472", h.Name, envs[i].MTU)
		}
		p, err := l.AttachPod(ctx, h, envs[i])
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	ping(t, pods[0].NS, pods[1].Addr.String())
	ping(t, pods[1].NS, pods[0].Addr.String())
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range procs {
		if exited, _ := d.Exited(); !exited {
			t.Errorf("socat on %s (pid %d) still runs after Close", d.Host.Name, d.Pid())
		}
	}
}

func TestCloseAndDown(t *testing.T) {
	state := filepath.Join(t.TempDir(), "lab.json")
	l := labtest.New(t, lab.Spec{Hosts: []lab.HostSpec{{Name: "a"}}, StateFile: state})
	s, err := lab.ReadState(state)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Namespaces) != 2 || s.Hosts[0].NS != l.Host("a").NS.Name || s.Dir != l.Dir() {
		t.Fatalf("state %+v", s)
	}
	// Down from the state file removes the lab as another process would.
	s.Keeper = 0
	if err := lab.WriteState(state, s); err != nil {
		t.Fatal(err)
	}
	if err := lab.Down(state); err != nil {
		t.Fatal(err)
	}
	if left := lab.Leftover(s.Namespaces); len(left) > 0 {
		t.Errorf("left after Down: %v", left)
	}
	if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lab dir after Down: %v", err)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file after Down: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close after Down: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestParseProcStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       time.Duration
		wantErr    bool
	}{
		{"plain", "1234 (weftd) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 4 0 99 0", 3250 * time.Millisecond, false},
		{"name with spaces and parens", "7 (a) b) R 1 7 7 0 -1 0 0 0 0 0 3 2 0 0", 50 * time.Millisecond, false},
		{"short", "7 (x) R 1 2 3", 0, true},
		{"no paren", "7 x R", 0, true},
		{"not a number", "7 (x) R 1 7 7 0 -1 0 0 0 0 0 a 2 0 0", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := lab.ParseProcStatCPU(tc.line, 100)
			if tc.wantErr {
				if !errors.Is(err, lab.ErrProcStat) {
					t.Fatalf("err %v, want ErrProcStat", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	// Our own process has a readable, growing CPU time.
	if _, err := lab.ProcCPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}

func FuzzParseProcStatCPU(f *testing.F) {
	f.Add("1 (init) S 0 1 1 0 -1 0 0 0 0 0 5 6 0 0")
	f.Fuzz(func(t *testing.T, line string) {
		if d, err := lab.ParseProcStatCPU(line, 100); err == nil && d < 0 {
			t.Fatalf("negative cpu %v", d)
		}
	})
}

// TestCNIPods: pods attached by the real flannel CNI plugin from a subnet.env (here
// the kernel host-gw reference's) get an address of the host's subnet and reach each
// other; Close runs DEL, which frees their addresses, and removes their namespaces.
func TestCNIPods(t *testing.T) {
	l := labtest.New(t, lab.Spec{Hosts: []lab.HostSpec{{Name: "a"}, {Name: "b"}}, NoEtcd: true})
	cni := labtest.CNIPath(t, labtest.BinDir("../../bin"))
	ctx := context.Background()
	hosts := l.Hosts()
	envs, err := l.KernelHostGW(ctx, hosts)
	if err != nil {
		t.Fatal(err)
	}
	var pods []*lab.Pod
	for i, h := range hosts {
		file := filepath.Join(l.Dir(), h.Name+"-subnet.env")
		if err := lease.WriteSubnetEnv(file, envs[i]); err != nil {
			t.Fatal(err)
		}
		p, err := l.AttachCNIPod(ctx, h, file, cni)
		if err != nil {
			t.Fatal(err)
		}
		if !lab.RefSubnet(h).Contains(p.Addr) || p.Addr == p.Gateway {
			t.Errorf("pod on %s at %s, gateway %s: not a pod address of %s", h.Name, p.Addr, p.Gateway, lab.RefSubnet(h))
		}
		pods = append(pods, p)
	}
	ping(t, pods[0].NS, pods[1].Addr.String())
	ping(t, pods[1].NS, pods[0].Addr.String())

	names := l.State().Namespaces
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if left := lab.Leftover(names); len(left) > 0 {
		t.Errorf("left after Close: %v", left)
	}
	for _, p := range pods {
		dir := filepath.Join("/var/lib/cni/networks", "weft-"+p.NS.Name)
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("host-local state %s after Close: %v", dir, err)
		}
	}
}

// TestEtcdCluster: a lab with Spec.EtcdCluster runs one etcd member per host, on the
// host's address; with Spec.EtcdTLS over https only. The lab's own writes go on with
// a member down, and the member comes back on its data.
func TestEtcdCluster(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tls    bool
		scheme string
	}{
		// Plain http is TestEtcdCluster of e2e's; a write after a kill can take 7 s.
		{"https", true, "https://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := labtest.New(t, lab.Spec{EtcdCluster: true, EtcdTLS: tc.tls,
				Hosts: []lab.HostSpec{{Name: "a"}, {Name: "b"}, {Name: "c", LAN: lab.LAN2}}})
			want := []string{tc.scheme + "192.0.2.10:2379", tc.scheme + "192.0.2.11:2379", tc.scheme + "198.51.100.10:2379"}
			if got := l.EtcdEndpoints(); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("endpoints %v, want %v", got, want)
			}
			if got := l.State().Etcd; got != strings.Join(want, ",") {
				t.Errorf("state's etcd %q", got)
			}
			if l.Etcd() != nil || len(l.EtcdMembers()) != 3 || (l.EtcdTLS() != nil) != tc.tls {
				t.Fatalf("etcd %v, members %v, TLS %v", l.Etcd(), l.EtcdMembers(), l.EtcdTLS())
			}
			ctx := context.Background()
			key := lease.DefaultPrefix + "/subnets/198.18.7.0-24"
			for i, m := range l.EtcdMembers() {
				if m.Host != l.Hosts()[i] || m.Server.Name() != m.Host.Name {
					t.Errorf("member %d: %s on %s", i, m.Server.Name(), m.Host.Name)
				}
			}
			// The first member's endpoint is the lab's first choice.
			m := l.EtcdMembers()[0]
			m.Server.Kill()
			// A write while the others elect a new leader fails: etcd's answer.
			val := `{"PublicIP":"192.0.2.10"}`
			testenv.Eventually(t, 20*time.Second, func() error { return l.Put(ctx, key, val) })
			if err := m.Server.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			leases, err := l.Leases(ctx, "")
			if err != nil || leases["198.18.7.0-24"] != val {
				t.Errorf("leases %v, %v; want %s", leases, err, val)
			}
		})
	}
}
