package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// startHealthz answers, as flanneld does for kube-flannel.yml's probes, GET /healthz
// (liveness: 200 while weftd runs) and GET /readyz (200 when ready, else 503 with the
// reason, see notReady); GET /stats (the backend's counters as JSON, when it keeps
// any); GET /metrics (Prometheus) and GET /peers (every peer's path as the probes see
// it). Without --healthz-port it does nothing. A port another process holds is
// waited for (listenHealthz).
func (d *daemon) startHealthz(ctx context.Context) (stop func(), err error) {
	if d.cfg.HealthzPort <= 0 {
		return func() {}, nil
	}
	addr := net.JoinHostPort(d.cfg.HealthzIP, strconv.Itoa(d.cfg.HealthzPort))
	ln, err := listenHealthz(ctx, addr, healthzPortWait, d.log)
	if err != nil || ln == nil {
		return func() {}, err
	}
	srv := &http.Server{Handler: d.healthzMux(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("healthz server", zap.Error(err))
		}
	}()
	d.log.Info("healthz listening", zap.Stringer("addr", ln.Addr()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close() // connections Shutdown could not wait out
		<-served
	}, nil
}

// healthzPortWait is how long weftd waits for its health port while another process
// holds it. A weftd of a version without hand-over, which a DaemonSet rolling with
// maxSurge runs beside the new pod until that one is ready, holds it until it is
// deleted: the kubelet's probes of the new pod reach the old weftd on the host's port
// meanwhile, so the new pod becomes ready and the old one is deleted.
const healthzPortWait = 2 * time.Minute

// listenHealthz listens on addr, waiting up to wait while the port is in use. A nil
// listener and error: ctx ended first.
func listenHealthz(ctx context.Context, addr string, wait time.Duration, log *zap.Logger) (net.Listener, error) {
	deadline := time.Now().Add(wait)
	logged := time.Time{}
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return ln, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return nil, fmt.Errorf("healthz on %s: %w", addr, err)
		}
		if time.Since(logged) > 10*time.Second {
			log.Warn("the health port is in use, perhaps by the weftd this one replaces: waiting for it",
				zap.String("addr", addr), zap.Duration("at-most", time.Until(deadline).Round(time.Second)))
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// healthzMux serves healthzRoutes.
func (d *daemon) healthzMux() *http.ServeMux {
	mux := http.NewServeMux()
	for path, h := range d.healthzRoutes() {
		mux.Handle(path, h)
	}
	return mux
}

// healthzRoutes are the health port's endpoints by path: /healthz, /readyz, /stats,
// /metrics (metrics.go) and /peers (paths.go). TestHealthEndpointsDocumented reads them.
func (d *daemon) healthzRoutes() map[string]http.Handler {
	return map[string]http.Handler{
		"/healthz": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintln(w, "weftd is running")
		}),
		"/readyz": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if err := d.notReady(time.Now()); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		}),
		"/metrics": d.metricsHandler(),
		"/peers":   http.HandlerFunc(d.servePeers),
		"/stats":   http.HandlerFunc(d.serveStats),
	}
}

// serveStats answers GET /stats: the backend's counters as JSON, when it keeps any.
func (d *daemon) serveStats(w http.ResponseWriter, _ *http.Request) {
	p := d.be.Load()
	if p == nil {
		http.Error(w, "no backend yet", http.StatusServiceUnavailable)
		return
	}
	rp, ok := (*p).(encap.Reporter)
	if !ok {
		http.Error(w, "this backend keeps no statistics", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rp.Report())
}

// Reasons for not being ready.
var (
	errNoLease    = errors.New("no lease yet")
	errNoDataPath = errors.New("data path not running")
	errNoLeaseSrc = errors.New("lease source not set up yet")
)

// notReady returns why weftd is not ready, or nil: ready means the lease is held, the
// data path runs, and the lease manager (when it can tell) has a current watch.
func (d *daemon) notReady(now time.Time) error {
	p := d.mgr.Load()
	if p == nil {
		return errNoLeaseSrc
	}
	h, _ := (*p).(lease.HealthReporter)
	if d.held.Load() == nil {
		if h != nil {
			if err := h.Health(now); err != nil {
				return fmt.Errorf("%w: %w", errNoLease, err)
			}
		}
		return errNoLease
	}
	if !d.ready.Load() {
		return errNoDataPath
	}
	if h != nil {
		return h.Health(now)
	}
	return nil
}
