package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"time"
)

// probeTimeout bounds one TLS probe of one endpoint.
const probeTimeout = 2 * time.Second

// probeTLS shakes hands with each https endpoint itself and reads once, to learn why
// a TLS connection broke. Over TLS 1.3 the client's side of the handshake ends before
// the server has looked at our certificate; its refusal is an alert that gRPC often
// never reads, writing its preface into a closed connection instead ("broken pipe").
// A read right after our own handshake gets the alert. It returns the first TLS
// error found, or nil when every endpoint took us or could not be reached at all.
func probeTLS(ctx context.Context, endpoints []string, cfg *tls.Config) error {
	for _, ep := range endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			continue
		}
		if err := probeOne(ctx, u.Host, cfg); err != nil {
			return err
		}
	}
	return nil
}

func probeOne(ctx context.Context, hostport string, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", hostport)
	if err != nil {
		return nil // unreachable: not a TLS matter
	}
	defer raw.Close()
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(hostport)
	}
	cfg.NextProtos = []string{"h2"} // as gRPC asks; etcd serves both on one port
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		return err
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetReadDeadline(deadline)
	var b [1]byte
	if _, err = conn.Read(b[:]); isRemoteTLSError(err) {
		return err
	}
	return nil // a timeout: the server waits for our request, it took our certificate
}

// isRemoteTLSError reports an alert from the peer ("remote error: tls: ...").
func isRemoteTLSError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}
