package etcd

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/lease"
)

var (
	attrsA = lease.Attrs{PublicIP: addr("192.0.2.10"), BackendType: "udp", HostID: "host-a"}
	attrsB = lease.Attrs{PublicIP: addr("192.0.2.11"), BackendType: "vxlan", BackendData: json.RawMessage(`{"VtepMAC":"aa:bb:cc:dd:ee:ff"}`)}
)

// TestRegistryConformance runs the same table against the v3 and the v2 registry.
func TestRegistryConformance(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, s *store)
	}{
		{"config", func(t *testing.T, s *store) {
			ctx := testCtx(t, 30*time.Second)
			if data, err := s.reg.Config(ctx); !errors.Is(err, ErrNoConfig) {
				t.Fatalf("Config before any = %q, %v; want ErrNoConfig", data, err)
			}
			s.put(t, "/config", `{"Network":"198.18.0.0/16"}`)
			if data, err := s.reg.Config(ctx); err != nil || string(data) != `{"Network":"198.18.0.0/16"}` {
				t.Fatalf("Config = %q, %v", data, err)
			}
		}},
		{"create twice", func(t *testing.T, s *store) {
			ctx := testCtx(t, 30*time.Second)
			sub := pfx("198.18.5.0/24")
			before := time.Now()
			exp, err := s.reg.Create(ctx, lease.Key{Subnet: sub}, attrsA, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if exp.Before(before.Add(time.Hour-5*time.Second)) || exp.After(time.Now().Add(time.Hour+5*time.Second)) {
				t.Errorf("expiration %v is not an hour from %v", exp, before)
			}
			if _, err := s.reg.Create(ctx, lease.Key{Subnet: sub}, attrsB, time.Hour); !errors.Is(err, ErrTaken) {
				t.Fatalf("second Create = %v, want ErrTaken", err)
			}
			if got := leaseMap(t, s.reg)[sub]; !got.Attrs.Equal(attrsA) {
				t.Errorf("lease after a lost Create: %+v, want %+v", got.Attrs, attrsA)
			}
		}},
		{"update and delete", func(t *testing.T, s *store) {
			ctx := testCtx(t, 30*time.Second)
			sub := pfx("198.18.6.0/24")
			if _, err := s.reg.Update(ctx, lease.Key{Subnet: sub}, attrsA, time.Hour); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Update of a missing lease = %v, want ErrNotFound", err)
			}
			// Delete is idempotent: a lease already gone is no error (both APIs alike).
			if err := s.reg.Delete(ctx, lease.Key{Subnet: sub}); err != nil {
				t.Fatalf("Delete of a missing lease = %v", err)
			}
			if _, err := s.reg.Create(ctx, lease.Key{Subnet: sub}, attrsA, time.Hour); err != nil {
				t.Fatal(err)
			}
			if _, err := s.reg.Update(ctx, lease.Key{Subnet: sub}, attrsB, time.Hour); err != nil {
				t.Fatalf("Update: %v", err)
			}
			if got := leaseMap(t, s.reg)[sub]; !got.Attrs.Equal(attrsB) {
				t.Errorf("after Update: %+v, want %+v", got.Attrs, attrsB)
			}
			if err := s.reg.Delete(ctx, lease.Key{Subnet: sub}); err != nil {
				t.Fatal(err)
			}
			if _, ok := leaseMap(t, s.reg)[sub]; ok {
				t.Error("lease listed after Delete")
			}
			if _, err := s.reg.Update(ctx, lease.Key{Subnet: sub}, attrsA, time.Hour); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Update after Delete = %v, want ErrNotFound", err)
			}
		}},
		{"list empty", func(t *testing.T, s *store) {
			l, err := s.reg.List(testCtx(t, 30*time.Second))
			if err != nil || len(l.Leases) != 0 || len(l.Unreadable) != 0 || l.Rev <= 0 {
				t.Fatalf("List of nothing = %+v, %v", l, err)
			}
		}},
		{"list unreadable", func(t *testing.T, s *store) {
			ctx := testCtx(t, 30*time.Second)
			if _, err := s.reg.Create(ctx, lease.Key{Subnet: pfx("198.18.1.0/24")}, attrsA, time.Hour); err != nil {
				t.Fatal(err)
			}
			s.put(t, "/subnets/198.18.2.0-24", `{"PublicIP":"192.0.2.11"}`) // flanneld udp
			// weft's own field unreadable: left out, the lease stands (flanneld takes it)
			s.put(t, "/subnets/198.18.3.0-24", `{"PublicIP":"192.0.2.12","WeftSite":"a","WeftOutside":"nonsense"}`)
			s.put(t, "/subnets/198.18.9.0-24", "garbage")
			s.put(t, "/subnets/198.18.10.0-24", `{"PublicIP":""}`)
			s.put(t, "/subnets/not-a-subnet", `{"PublicIP":"192.0.2.99"}`)
			s.put(t, "/subnets/198.18.11.7-24", `{"PublicIP":"192.0.2.98"}`)
			l, err := s.reg.List(ctx)
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			var got []netip.Prefix
			for _, x := range l.Leases {
				got = append(got, x.Subnet)
				if x.Subnet == pfx("198.18.3.0/24") && (x.Attrs.Site != "a" || x.Attrs.Outside.IsValid()) {
					t.Errorf("lease with an unreadable WeftOutside: %+v, want its site and no Outside", x.Attrs)
				}
			}
			slices.SortFunc(got, netip.Prefix.Compare)
			slices.SortFunc(l.Unreadable, func(a, b lease.Key) int { return a.Subnet.Compare(b.Subnet) })
			if want := []netip.Prefix{pfx("198.18.1.0/24"), pfx("198.18.2.0/24"), pfx("198.18.3.0/24")}; !reflect.DeepEqual(got, want) {
				t.Errorf("leases %v, want %v", got, want)
			}
			if want := []lease.Key{{Subnet: pfx("198.18.9.0/24")}, {Subnet: pfx("198.18.10.0/24")}}; !reflect.DeepEqual(l.Unreadable, want) {
				t.Errorf("unreadable %v, want %v", l.Unreadable, want)
			}
		}},
		{"ttl expiry", func(t *testing.T, s *store) {
			sub := pfx("198.18.7.0/24")
			if _, err := s.reg.Create(testCtx(t, 30*time.Second), lease.Key{Subnet: sub}, attrsA, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			if _, ok := leaseMap(t, s.reg)[sub]; !ok {
				t.Fatal("lease not listed right after Create")
			}
			eventually(t, 30*time.Second, "the lease to expire", func() bool {
				_, ok := leaseMap(t, s.reg)[sub]
				return !ok
			})
		}},
	}
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) { tc.run(t, newStore(t, srv, api)) })
		}
	})
}

func TestNewRegistryOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"no endpoints", Options{API: "v3"}},
		{"unknown API", Options{Endpoints: []string{"http://127.0.0.1:1"}, API: "v4"}},
		{"missing cert", Options{Endpoints: []string{"http://127.0.0.1:1"}, CertFile: "/nonexistent.pem", KeyFile: "/nonexistent.key"}},
		{"missing CA", Options{Endpoints: []string{"http://127.0.0.1:1"}, CAFile: "/nonexistent.pem"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, err := NewRegistry(tc.opts, nil)
			if !errors.Is(err, ErrBadOptions) {
				if reg != nil {
					reg.Close()
				}
				t.Fatalf("NewRegistry = %v, want ErrBadOptions", err)
			}
		})
	}
}
