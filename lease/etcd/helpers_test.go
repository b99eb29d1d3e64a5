package etcd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	client "go.etcd.io/etcd/client/v2"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/bench/etcdtest"
	"github.com/weftnet/weft/lease"
)

// apis are the registries every conformance table runs against.
var apis = []string{"v3", "v2"}

// eachAPI starts one real etcd for t and runs f as subtests "v3" and "v2" on it.
func eachAPI(t *testing.T, f func(t *testing.T, srv *etcdproc.Server, api string)) {
	t.Helper()
	srv := etcdtest.Start(t)
	for _, api := range apis {
		t.Run(api, func(t *testing.T) { f(t, srv, api) })
	}
}

// store is one registry on its own random prefix, with raw access to the same keys
// for writing what a registry never would (malformed values, churn, compaction).
type store struct {
	api    string
	prefix string
	reg    Registry
	put    func(t *testing.T, key, val string) // key relative to prefix
	del    func(t *testing.T, key string)
	// hasTTL reports whether the key (relative to prefix) carries a TTL: an etcd
	// lease (v3) or an expiration (v2).
	hasTTL func(t *testing.T, key string) bool
	// gap makes every revision before now unwatchable (v3: compaction; v2: more than
	// 1000 events, past the v2 event history).
	gap func(t *testing.T)
}

func randHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func newStore(t *testing.T, srv *etcdproc.Server, api string) *store {
	t.Helper()
	s := &store{api: api, prefix: "/weft-test/" + randHex(t, 6)}
	reg, err := NewRegistry(Options{Endpoints: []string{srv.Endpoint()}, Prefix: s.prefix, API: api}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	s.reg = reg
	ctx := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		return c
	}
	switch api {
	case "v3":
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		s.put = func(t *testing.T, k, v string) {
			t.Helper()
			if _, err := cli.Put(ctx(), s.prefix+k, v); err != nil {
				t.Fatalf("put %s: %v", k, err)
			}
		}
		s.del = func(t *testing.T, k string) {
			t.Helper()
			if _, err := cli.Delete(ctx(), s.prefix+k); err != nil {
				t.Fatalf("delete %s: %v", k, err)
			}
		}
		s.hasTTL = func(t *testing.T, k string) bool {
			t.Helper()
			resp, err := cli.Get(ctx(), s.prefix+k)
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("get %s: %v (%d keys)", k, err, len(resp.Kvs))
			}
			return resp.Kvs[0].Lease != 0
		}
		s.gap = func(t *testing.T) {
			t.Helper()
			resp, err := cli.Put(ctx(), s.prefix+"/churn", "x")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cli.Compact(ctx(), resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
				t.Fatalf("compact: %v", err)
			}
		}
		t.Cleanup(func() { cli.Delete(context.Background(), s.prefix+"/", clientv3.WithPrefix()) })
	case "v2":
		c, err := client.New(client.Config{Endpoints: []string{srv.Endpoint()}})
		if err != nil {
			t.Fatal(err)
		}
		kapi := client.NewKeysAPI(c)
		s.put = func(t *testing.T, k, v string) {
			t.Helper()
			if _, err := kapi.Set(ctx(), s.prefix+k, v, nil); err != nil {
				t.Fatalf("set %s: %v", k, err)
			}
		}
		s.del = func(t *testing.T, k string) {
			t.Helper()
			if _, err := kapi.Delete(ctx(), s.prefix+k, nil); err != nil {
				t.Fatalf("delete %s: %v", k, err)
			}
		}
		s.hasTTL = func(t *testing.T, k string) bool {
			t.Helper()
			resp, err := kapi.Get(ctx(), s.prefix+k, &client.GetOptions{Quorum: true})
			if err != nil {
				t.Fatalf("get %s: %v", k, err)
			}
			return resp.Node.Expiration != nil
		}
		s.gap = func(t *testing.T) {
			t.Helper()
			churn(t, 1100, func(i int) error {
				_, err := kapi.Set(ctx(), fmt.Sprintf("%s/churn/%d", s.prefix, i%16), "x", nil)
				return err
			})
		}
		t.Cleanup(func() {
			kapi.Delete(context.Background(), s.prefix, &client.DeleteOptions{Recursive: true, Dir: true})
		})
	default:
		t.Fatalf("unknown api %q", api)
	}
	return s
}

// churn runs n writes on 16 goroutines.
func churn(t *testing.T, n int, write func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				if err := write(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("churn: %v", err)
	}
}

// testCtx is a context that ends with the test or after d.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

// leaseMap lists the store and indexes the leases by subnet.
func leaseMap(t *testing.T, reg Registry) map[netip.Prefix]lease.Lease {
	t.Helper()
	l, err := reg.List(testCtx(t, 30*time.Second))
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	m := map[netip.Prefix]lease.Lease{}
	for _, x := range l.Leases {
		m[x.Subnet] = x
	}
	return m
}
