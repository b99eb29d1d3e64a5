package etcd

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/lease"
)

var ourIP = addr("192.0.2.1")

// newManager is a manager on s with its own state file (unless opts has one), after
// Config; the network config is written first when cfg is not "".
func newManager(t *testing.T, s *store, cfg string, opts ManagerOptions) *Manager {
	t.Helper()
	if cfg != "" {
		s.put(t, "/config", cfg)
	}
	if opts.StateFile == "" {
		opts.StateFile = filepath.Join(t.TempDir(), "lease.json")
	}
	m := NewManager(s.reg, opts, zaptest.NewLogger(t))
	if _, err := m.Config(testCtx(t, 30*time.Second)); err != nil {
		t.Fatalf("Config: %v", err)
	}
	return m
}

func writeState(t *testing.T, path string, st lease.State) {
	t.Helper()
	if err := lease.SaveState(path, st); err != nil {
		t.Fatal(err)
	}
}

func create(t *testing.T, s *store, sub netip.Prefix, a lease.Attrs) {
	t.Helper()
	if _, err := s.reg.Create(testCtx(t, 30*time.Second), lease.Key{Subnet: sub}, a, time.Hour); err != nil {
		t.Fatalf("create %v: %v", sub, err)
	}
}

func TestAcquire(t *testing.T) {
	const net16 = `{"Network":"198.18.0.0/16"}`
	const net24 = `{"Network":"198.18.0.0/24","SubnetLen":26}` // usable: .64 .128 .192
	other := lease.Attrs{PublicIP: addr("192.0.2.50"), BackendType: "udp", HostID: "someone"}
	mine := func(typ, host string) lease.Attrs {
		return lease.Attrs{PublicIP: ourIP, BackendType: typ, HostID: host}
	}
	type env struct {
		s         *store
		state     string // state file path, already holding HostID "me"
		subnetEnv string // subnet.env path (not written)
	}
	cases := []struct {
		name    string
		cfg     string
		setup   func(t *testing.T, e env)
		want    string // the subnet; "" when any in range will do
		wantErr error
		gone    string // a subnet that must no longer be leased
	}{
		{name: "own lease by PublicIP", cfg: net16, want: "198.18.7.0/24", setup: func(t *testing.T, e env) {
			writeState(t, e.state, lease.State{HostID: "me", Subnet: pfx("198.18.9.0/24")})
			create(t, e.s, pfx("198.18.7.0/24"), mine("udp", "me"))
		}},
		{name: "flanneld lease of our PublicIP", cfg: net16, want: "198.18.7.0/24", setup: func(t *testing.T, e env) {
			create(t, e.s, pfx("198.18.7.0/24"), lease.Attrs{PublicIP: ourIP})
		}},
		{name: "own lease of another backend", cfg: net16, want: "198.18.9.0/24", gone: "198.18.7.0/24", setup: func(t *testing.T, e env) {
			writeState(t, e.state, lease.State{HostID: "me", Subnet: pfx("198.18.9.0/24")})
			create(t, e.s, pfx("198.18.7.0/24"), mine("vxlan", "me"))
		}},
		{name: "own lease out of range", cfg: `{"Network":"198.18.0.0/16","SubnetMin":"198.18.100.0"}`, gone: "198.18.7.0/24", setup: func(t *testing.T, e env) {
			create(t, e.s, pfx("198.18.7.0/24"), mine("udp", "me"))
		}},
		{name: "previous subnet from state file", cfg: net16, want: "198.18.9.0/24", setup: func(t *testing.T, e env) {
			writeState(t, e.state, lease.State{HostID: "me", Network: pfx("198.18.0.0/16"), Subnet: pfx("198.18.9.0/24")})
			create(t, e.s, pfx("198.18.8.0/24"), other)
		}},
		{name: "subnet.env before state file", cfg: net16, want: "198.18.11.0/24", setup: func(t *testing.T, e env) {
			writeState(t, e.state, lease.State{HostID: "me", Subnet: pfx("198.18.9.0/24")})
			if err := lease.WriteSubnetEnv(e.subnetEnv, lease.SubnetEnv{Network: pfx("198.18.0.0/16"), Subnet: pfx("198.18.11.0/24"), MTU: 1472}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "previous subnet taken", cfg: net16, gone: "", setup: func(t *testing.T, e env) {
			writeState(t, e.state, lease.State{HostID: "me", Subnet: pfx("198.18.9.0/24")})
			create(t, e.s, pfx("198.18.9.0/24"), other)
		}},
		{name: "previous subnet out of range", cfg: net16, setup: func(t *testing.T, e env) {
			writeState(t, e.state, lease.State{HostID: "me", Subnet: pfx("198.19.9.0/24")})
		}},
		{name: "unreadable lease is not free", cfg: net24, want: "198.18.0.192/26", setup: func(t *testing.T, e env) {
			writeState(t, e.state, lease.State{HostID: "me", Subnet: pfx("198.18.0.128/26")})
			create(t, e.s, pfx("198.18.0.64/26"), other)
			e.s.put(t, "/subnets/198.18.0.128-26", "garbage")
		}},
		{name: "exhausted", cfg: net24, wantErr: ErrNoFreeSubnet, setup: func(t *testing.T, e env) {
			create(t, e.s, pfx("198.18.0.64/26"), other)
			create(t, e.s, pfx("198.18.0.128/26"), lease.Attrs{PublicIP: addr("192.0.2.51")})
			e.s.put(t, "/subnets/198.18.0.192-26", `{"PublicIP":""}`)
		}},
		{name: "PublicIP held by another host", cfg: net16, wantErr: ErrPublicIPConflict, setup: func(t *testing.T, e env) {
			create(t, e.s, pfx("198.18.7.0/24"), mine("udp", "not-me"))
		}},
	}
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				dir := t.TempDir()
				e := env{s: newStore(t, srv, api), state: filepath.Join(dir, "lease.json"), subnetEnv: filepath.Join(dir, "subnet.env")}
				writeState(t, e.state, lease.State{HostID: "me"})
				tc.setup(t, e)
				m := newManager(t, e.s, tc.cfg, ManagerOptions{StateFile: e.state, SubnetFile: e.subnetEnv})
				attrs := lease.Attrs{PublicIP: ourIP, BackendType: "udp", BackendData: json.RawMessage(`{"n":1}`)}
				l, err := m.Acquire(testCtx(t, 60*time.Second), attrs)
				if tc.wantErr != nil {
					if !errors.Is(err, tc.wantErr) {
						t.Fatalf("Acquire = %v, %v; want %v", l, err, tc.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				cfg, _ := lease.ParseConfig([]byte(tc.cfg))
				if tc.want != "" && l.Subnet != pfx(tc.want) || !cfg.InRange(l.Subnet) {
					t.Fatalf("Acquire = %v, want %s in range", l.Subnet, tc.want)
				}
				attrs.HostID = "me"
				stored := leaseMap(t, e.s.reg)
				if got := stored[l.Subnet]; !got.Attrs.Equal(attrs) || !l.Attrs.Equal(attrs) {
					t.Errorf("stored %+v, returned %+v; want %+v", got.Attrs, l.Attrs, attrs)
				}
				if tc.gone != "" {
					if got, ok := stored[pfx(tc.gone)]; ok && pfx(tc.gone) != l.Subnet {
						t.Errorf("old lease %s still there: %+v", tc.gone, got)
					}
				}
				if st, err := lease.LoadState(e.state); err != nil || st.Subnet != l.Subnet || st.Network != cfg.Network || st.HostID != "me" {
					t.Errorf("state file after Acquire: %+v, %v", st, err)
				}
			})
		}
	})
}

func TestAcquireNeedsConfig(t *testing.T) {
	m := NewManager(nil, ManagerOptions{StateFile: filepath.Join(t.TempDir(), "s.json")}, zaptest.NewLogger(t))
	if _, err := m.Acquire(t.Context(), lease.Attrs{PublicIP: ourIP}); err == nil {
		t.Fatal("Acquire before Config succeeded")
	}
}

func TestAcquireStateFile(t *testing.T) {
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		for _, tc := range []struct {
			name, content string // content "-": no state file at all
			ok            bool
		}{
			{"corrupt", "garbage", false},
			{"none", "-", true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := newStore(t, srv, api)
				path := ""
				if tc.content != "-" {
					path = filepath.Join(t.TempDir(), "lease.json")
					if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				m := newManager(t, s, `{"Network":"198.18.0.0/16"}`, ManagerOptions{})
				m.opts.StateFile = path
				l, err := m.Acquire(testCtx(t, 60*time.Second), lease.Attrs{PublicIP: ourIP, BackendType: "udp"})
				leases := leaseMap(t, s.reg)
				if !tc.ok {
					if err == nil || len(leases) != 0 {
						t.Fatalf("Acquire with a %s state file = %v, %v; leases %v", tc.name, l, err, leases)
					}
					return
				}
				if err != nil || leases[l.Subnet].Attrs.HostID != "" {
					t.Fatalf("Acquire = %+v, %v; stored %+v", l, err, leases[l.Subnet])
				}
			})
		}
	})
}
