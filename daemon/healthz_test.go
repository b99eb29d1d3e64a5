package daemon

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

// healthyManager is a lease.Manager that only reports health (pure logic test of
// /readyz; the real managers are tested against etcd and kube-apiserver).
type healthyManager struct {
	lease.Manager
	err error
}

func (m healthyManager) Health(time.Time) error { return m.err }

// plainManager reports no health of its own (as the etcd manager).
type plainManager struct{ lease.Manager }

func TestReadyz(t *testing.T) {
	watchDown := errors.New("node watch failing since 12:00: connection refused")
	held := &lease.Lease{Subnet: netip.MustParsePrefix("198.18.1.0/24")}
	for _, tt := range []struct {
		name     string
		mgr      lease.Manager
		held     *lease.Lease
		dataPath bool
		code     int
		body     string
	}{
		{"before the lease source", nil, nil, false, 503, "lease source not set up"},
		{"waiting for a lease", healthyManager{err: errors.New("waiting for our node's podCIDR")}, nil, false, 503, "no lease yet: waiting for our node's podCIDR"},
		{"waiting for a lease, no health", plainManager{}, nil, false, 503, "no lease yet"},
		{"lease without data path", healthyManager{}, held, false, 503, "data path not running"},
		{"watch down", healthyManager{err: watchDown}, held, true, 503, watchDown.Error()},
		{"ready", healthyManager{}, held, true, 200, "ok"},
		{"ready without health", plainManager{}, held, true, 200, "ok"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := &daemon{cfg: &Config{}, log: zap.NewNop()}
			if tt.mgr != nil {
				d.mgr.Store(&tt.mgr)
			}
			d.held.Store(tt.held)
			d.ready.Store(tt.dataPath)
			mux := d.healthzMux()
			for path, want := range map[string]int{"/readyz": tt.code, "/healthz": 200} {
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), "GET", path, nil))
				if rec.Code != want {
					t.Fatalf("%s: %d %q, want %d", path, rec.Code, rec.Body, want)
				}
				if path == "/readyz" && !strings.Contains(rec.Body.String(), tt.body) {
					t.Fatalf("%s: body %q, want %q in it", path, rec.Body, tt.body)
				}
			}
		})
	}
}

// The health port held by another process is waited for: taken once it is free,
// refused with the listen error once the wait is over, and given up when ctx ends.
func TestListenHealthzWaits(t *testing.T) {
	hold := func(t *testing.T) (net.Listener, string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln, ln.Addr().String()
	}
	log := zap.NewNop()
	t.Run("freed", func(t *testing.T) {
		old, addr := hold(t)
		time.AfterFunc(300*time.Millisecond, func() { old.Close() })
		ln, err := listenHealthz(context.Background(), addr, 10*time.Second, log)
		if err != nil || ln == nil {
			t.Fatalf("listenHealthz: %v, %v; want the port once freed", ln, err)
		}
		ln.Close()
	})
	t.Run("held", func(t *testing.T) {
		old, addr := hold(t)
		defer old.Close()
		ln, err := listenHealthz(context.Background(), addr, 300*time.Millisecond, log)
		if !errors.Is(err, syscall.EADDRINUSE) || ln != nil {
			t.Fatalf("listenHealthz: %v, %v; want EADDRINUSE after the wait", ln, err)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		old, addr := hold(t)
		defer old.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		ln, err := listenHealthz(ctx, addr, time.Minute, log)
		if err != nil || ln != nil {
			t.Fatalf("listenHealthz: %v, %v; want nothing once ctx ended", ln, err)
		}
	})
}
