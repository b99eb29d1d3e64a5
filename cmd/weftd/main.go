// Command weftd is weft's overlay network daemon, a drop-in for flanneld: it leases a
// subnet of the cluster network, writes subnet.env, watches the other hosts' leases and
// carries their traffic with the configured backend.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/weftnet/weft/daemon"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.2.0-dev"

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func run(args []string, env func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if c, ok := findCommand(args[0]); ok { // weftd's commands besides running the daemon
			return c.run(args[1:], env, stdout, stderr)
		}
	}
	opts, err := parseFlags(args, env, stderr)
	if errors.Is(err, flagHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "weftd: %v\n", err)
		return 2
	}
	if opts.version {
		fmt.Fprintln(stdout, readBuildInfo())
		return 0
	}
	log := newLogger(stderr, opts.verbosity)
	defer log.Sync()
	setMemoryLimit(env, "/", log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg := opts.config(readBuildInfo())
	err = daemon.Run(ctx, cfg, log)
	if errors.Is(err, daemon.ErrHandedOver) {
		log.Info("weftd stopped: a new weftd took over", zap.Error(err))
		if cfg.Kube != nil {
			// A pod that exits is restarted, and would take the host back. The
			// DaemonSet deletes this pod once the new one is ready.
			log.Info("waiting for Kubernetes to delete this pod")
			<-ctx.Done()
		}
		return 0
	}
	if err != nil {
		log.Error("weftd stopped", zap.Error(err))
		return 1
	}
	log.Info("weftd stopped; the lease is kept for the next start")
	return 0
}
