package lease

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.uber.org/zap"
)

// EtcdOptions says how to reach etcd.
type EtcdOptions struct {
	Endpoints                 []string
	Prefix                    string
	CertFile, KeyFile, CAFile string
	Username, Password        string
	API                       string // "v3" (default) or "v2"
}

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
