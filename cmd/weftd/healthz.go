package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/encap"
)

// serveHealthz answers GET /healthz (200 once the data path runs, 503 before) and
// GET /stats (the backend's counters as JSON, when it keeps any).
func (d *daemon) serveHealthz() (stop func(), err error) {
	addr := net.JoinHostPort(d.opts.healthzIP, strconv.Itoa(d.opts.healthzPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("healthz on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !d.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
		p := d.be.Load()
		if p == nil {
			http.Error(w, "no backend yet", http.StatusServiceUnavailable)
			return
		}
		sr, ok := (*p).(encap.StatsReporter)
		if !ok {
			http.Error(w, "this backend keeps no statistics", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(sr.Stats())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
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
