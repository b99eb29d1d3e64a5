// Package etcd is a lease.Manager over etcd, in flanneld's layout, on etcd's v3 or v2
// API. It holds:
//   - the registries that keep the network config and the leases: Registry
//     (registry.go), Options and NewRegistry (etcd.go), one per API (etcd3.go,
//     etcd2.go);
//   - the Manager over a registry: Config and Acquire with the choice of an IPv4
//     subnet (manager.go) and of an IPv6 one (alloc_v6.go), Hold, the renewal loop
//     (renew.go), Watch (watch.go), MonitorReachability and Health (health.go,
//     health_v2.go for the v2 API's probes) and Stats (stats.go);
//   - the naming of why etcd cannot be reached or refuses us (etcd_errors.go,
//     etcd_tlsprobe.go);
//   - the migration of a cluster's keys from v2 to v3 (migrate.go).
package etcd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

// Options says how to reach etcd.
type Options struct {
	Endpoints                 []string
	Prefix                    string
	CertFile, KeyFile, CAFile string
	Username, Password        string
	API                       string // "v3" (default) or "v2"

	certNotAfter time.Time   // of the client certificate, for error messages
	tlsCfg       *tls.Config // to probe a TLS connection that broke (etcd_tlsprobe.go)
}

// requestTimeout bounds each attempt of the calls made while the daemon starts (the
// network config, authentication): an answer or a named cause within seconds, then
// another attempt, rather than a wait without a word.
const requestTimeout = 4 * time.Second

// ErrBadOptions is wrapped by errors about Options.
var ErrBadOptions = errors.New("bad etcd options")

// NewRegistry returns the registry for opts.API. It does no network I/O: the
// daemon starts while etcd is down and waits for it.
func NewRegistry(opts Options, log *zap.Logger) (Registry, error) {
	if len(opts.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: no endpoints", ErrBadOptions)
	}
	if opts.Prefix == "" {
		opts.Prefix = lease.DefaultPrefix
	}
	opts.Prefix = "/" + strings.Trim(opts.Prefix, "/")
	tlsCfg, err := opts.tls()
	if err != nil {
		return nil, err
	}
	opts.tlsCfg = tlsCfg
	if tlsCfg != nil && len(tlsCfg.Certificates) > 0 {
		if leaf, err := x509.ParseCertificate(tlsCfg.Certificates[0].Certificate[0]); err == nil {
			opts.certNotAfter = leaf.NotAfter
			if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
				log.Error("the etcd client certificate is not valid now: etcd will refuse it",
					zap.String("certfile", opts.CertFile), zap.Time("not-before", leaf.NotBefore), zap.Time("not-after", leaf.NotAfter))
			}
		}
	}
	switch opts.API {
	case "", "v3":
		return newEtcd3(opts, tlsCfg, log)
	case "v2":
		return newEtcd2(opts, tlsCfg, log)
	}
	return nil, fmt.Errorf("%w: API %q (want v3 or v2)", ErrBadOptions, opts.API)
}

func (o Options) tls() (*tls.Config, error) {
	if o.CertFile == "" && o.KeyFile == "" && o.CAFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CertFile != "" || o.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --etcd-certfile/--etcd-keyfile: %w", ErrBadOptions, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --etcd-cafile: %w", ErrBadOptions, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: --etcd-cafile %s holds no certificate", ErrBadOptions, o.CAFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

func (o Options) configKey() string  { return o.Prefix + "/config" }
func (o Options) subnetsDir() string { return o.Prefix + "/subnets/" }
