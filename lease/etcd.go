package lease

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
)

// EtcdOptions says how to reach etcd.
type EtcdOptions struct {
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

// ErrBadEtcdOptions is wrapped by errors about EtcdOptions.
var ErrBadEtcdOptions = errors.New("bad etcd options")

// NewEtcdRegistry returns the registry for opts.API. It does no network I/O: the
// daemon starts while etcd is down and waits for it.
func NewEtcdRegistry(opts EtcdOptions, log *zap.Logger) (Registry, error) {
	if len(opts.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: no endpoints", ErrBadEtcdOptions)
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
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
	return nil, fmt.Errorf("%w: API %q (want v3 or v2)", ErrBadEtcdOptions, opts.API)
}

func (o EtcdOptions) tls() (*tls.Config, error) {
	if o.CertFile == "" && o.KeyFile == "" && o.CAFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CertFile != "" || o.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --etcd-certfile/--etcd-keyfile: %w", ErrBadEtcdOptions, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --etcd-cafile: %w", ErrBadEtcdOptions, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: --etcd-cafile %s holds no certificate", ErrBadEtcdOptions, o.CAFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

func (o EtcdOptions) configKey() string  { return o.Prefix + "/config" }
func (o EtcdOptions) subnetsDir() string { return o.Prefix + "/subnets/" }
