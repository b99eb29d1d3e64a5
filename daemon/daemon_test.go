package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/bench/etcdtest"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/lease/etcd"
)

// TestRunLeavesNoGoroutine runs the daemon in-process against a real etcd (both APIs,
// the alloc backend, the health endpoint on) until it is ready, stops it, and checks
// that every goroutine it started has ended: the lease manager's watches and renewal,
// the etcd monitor, the resync loops, the health server and the etcd client.
func TestRunLeavesNoGoroutine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real etcd server")
	}
	srv := etcdtest.Start(t)
	if _, err := externalInterface(ifaceChoice{regexes: []string{"."}}); err != nil {
		testenv.Need(t, false, "an interface with a global IPv4 address: "+err.Error())
	}
	for _, api := range []string{"v3", "v2"} {
		t.Run(api, func(t *testing.T) {
			prefix := "/weft-test/goroutines-" + api
			putConfig(t, srv, api, prefix, `{"Network":"198.18.0.0/16","Backend":{"Type":"alloc"}}`)
			dir := t.TempDir()
			cfg := &Config{
				Etcd:         etcd.Options{Endpoints: []string{srv.Endpoint()}, API: api, Prefix: prefix},
				IfaceRegexes: []string{"."}, PublicIP: "192.0.2.10",
				SubnetFile:     filepath.Join(dir, "subnet.env"),
				LeaseStateFile: filepath.Join(dir, "lease.json"),
				RenewMargin:    time.Hour, Resync: 5 * time.Second,
				HealthzIP: "127.0.0.1", HealthzPort: freeTCPPort(t),
			}
			before := goroutines()
			d := &daemon{cfg: cfg, log: zaptest.NewLogger(t)}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- d.run(ctx) }()
			deadline := time.Now().Add(30 * time.Second)
			for !d.ready.Load() {
				select {
				case err := <-errc:
					t.Fatalf("daemon stopped before it was ready: %v", err)
				case <-time.After(20 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatal("daemon not ready after 30 s")
				}
			}
			env, err := lease.ReadSubnetEnv(cfg.SubnetFile)
			if err != nil || !env.Subnet.IsValid() {
				t.Fatalf("subnet.env: %+v, %v", env, err)
			}
			cancel()
			if err := <-errc; err != nil {
				t.Fatalf("run: %v", err)
			}
			if left := leftover(before); len(left) > 0 {
				t.Fatalf("%d goroutines outlived daemon.run:\n\n%s", len(left), strings.Join(left, "\n\n"))
			}
		})
	}
}

var goroutineHeader = regexp.MustCompile(`^goroutine (\d+) `)

// goroutines returns the stacks of every goroutine, by id.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if m := goroutineHeader.FindStringSubmatch(g); m != nil {
			out[m[1]] = g
		}
	}
	return out
}

// leftover returns the stacks of goroutines that did not exist before, other than the
// calling test's. Goroutines of libraries that end just after a Close returns (the
// gRPC client's) get a short grace period.
func leftover(before map[string]string) []string {
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; {
		left = left[:0]
		for id, g := range goroutines() {
			if _, ok := before[id]; !ok && !strings.Contains(g, "testing.tRunner") {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			sort.Strings(left)
			return left
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
}

// putConfig writes the network config through etcd's HTTP API (v3 through its JSON
// gateway), so the test holds no client of its own while it counts goroutines.
func putConfig(t *testing.T, srv *etcdproc.Server, api, prefix, config string) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var resp *http.Response
	var err error
	key := prefix + "/config"
	if api == "v2" {
		req, rerr := http.NewRequest(http.MethodPut, srv.Endpoint()+"/v2/keys"+key,
			strings.NewReader(url.Values{"value": {config}}.Encode()))
		if rerr != nil {
			t.Fatal(rerr)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err = c.Do(req)
	} else {
		body, _ := json.Marshal(map[string]string{
			"key":   base64.StdEncoding.EncodeToString([]byte(key)),
			"value": base64.StdEncoding.EncodeToString([]byte(config)),
		})
		resp, err = c.Post(srv.Endpoint()+"/v3/kv/put", "application/json", bytes.NewReader(body))
	}
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("put %s: %s", key, resp.Status)
	}
}

// freeTCPPort returns a loopback TCP port free a moment ago.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
