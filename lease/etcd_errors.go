package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	client "go.etcd.io/etcd/client/v2"
)

// The causes an etcd call can fail for that an operator must act on. Errors from the
// registries wrap one of them (errors.Is) with a hint naming the flag or the role to
// look at, and keep the client library's own words after it.
var (
	// ErrEtcdUnreachable: no connection to any endpoint (refused, no route, timeout).
	ErrEtcdUnreachable = errors.New("etcd unreachable")
	// ErrEtcdTLS: the TLS handshake failed, on either side.
	ErrEtcdTLS = errors.New("etcd TLS handshake failed")
	// ErrEtcdAuth: etcd rejected the user name and password, or wants some.
	ErrEtcdAuth = errors.New("etcd authentication failed")
	// ErrEtcdPermission: the user's roles do not grant the key.
	ErrEtcdPermission = errors.New("etcd permission denied")
)

// tlsCause is one TLS failure recognised by the words the Go TLS stack uses; gRPC
// passes connection errors on only as text.
type tlsCause struct {
	match string
	hint  func(o EtcdOptions) string
}

var tlsCauses = []tlsCause{
	{"certificate signed by unknown authority", func(o EtcdOptions) string {
		if o.CAFile == "" {
			return "etcd's certificate is not signed by a CA this host trusts (set --etcd-cafile)"
		}
		return "etcd's certificate is not signed by the CA in --etcd-cafile=" + o.CAFile
	}},
	{"certificate has expired or is not yet valid", func(EtcdOptions) string {
		return "etcd's certificate has expired or is not yet valid"
	}},
	{"certificate is valid for", func(EtcdOptions) string {
		return "etcd's certificate does not name the host of the endpoint"
	}},
	{"remote error: tls:", func(o EtcdOptions) string {
		h := "etcd refused our client certificate (--etcd-certfile=" + o.CertFile + ")"
		if o.CertFile == "" {
			h = "etcd wants a client certificate (set --etcd-certfile and --etcd-keyfile)"
		}
		if !o.certNotAfter.IsZero() && time.Now().After(o.certNotAfter) {
			h += "; it expired at " + o.certNotAfter.UTC().Format(time.RFC3339)
		}
		return h
	}},
	{"first record does not look like a TLS handshake", func(EtcdOptions) string {
		return "the endpoint does not speak TLS (use http://)"
	}},
	{"server gave HTTP response to HTTPS client", func(EtcdOptions) string {
		return "the endpoint does not speak TLS (use http://)"
	}},
	{"tls:", func(EtcdOptions) string { return "TLS error" }},
	{"x509:", func(EtcdOptions) string { return "certificate error" }},
}

var unreachableWords = []string{
	"connection refused", "no route to host", "network is unreachable", "no such host",
	"i/o timeout", "connection reset", "broken pipe", "EOF", "server preface",
	"context deadline exceeded", "etcd cluster is unavailable",
}

// explain wraps err, from an etcd call about key, in the sentinel of its cause. Errors
// of other kinds (etcd's answers about keys, cancellation) come back unchanged.
func (o EtcdOptions) explain(err error, key string) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	if e := rpctypes.Error(err); e != nil {
		err = e
	}
	msg := err.Error()
	user := o.Username
	if user == "" {
		user = "(none: the client certificate's CN, if etcd takes it)"
	}
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return fmt.Errorf("%w for user %q: check --etcd-username and --etcd-password: %w", ErrEtcdAuth, o.Username, err)
	case errors.Is(err, rpctypes.ErrUserEmpty), errors.Is(err, rpctypes.ErrUserNotFound):
		return fmt.Errorf("%w: etcd wants a known user (--etcd-username/--etcd-password, or a client certificate whose CN is an etcd user): %w", ErrEtcdAuth, err)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Errorf("%w for user %s on %s: %s: %w", ErrEtcdPermission, user, key, o.roleHint(), err)
	case isV2NoCredentials(err):
		return fmt.Errorf("%w or %w (the v2 API does not say which) for user %s on %s: check --etcd-username and --etcd-password; %s: %w",
			ErrEtcdAuth, ErrEtcdPermission, user, key, o.roleHint(), err)
	}
	for _, c := range tlsCauses {
		if strings.Contains(msg, c.match) {
			return fmt.Errorf("%w at %s: %s: %w", ErrEtcdTLS, o.endpoints(), c.hint(o), err)
		}
	}
	if o.tlsCfg != nil && isTransportError(msg) {
		if perr := probeTLS(context.Background(), o.Endpoints, o.tlsCfg); perr != nil {
			for _, c := range tlsCauses {
				if strings.Contains(perr.Error(), c.match) {
					return fmt.Errorf("%w at %s: %s: %w (the connection broke: %w)", ErrEtcdTLS, o.endpoints(), c.hint(o), perr, err)
				}
			}
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w at %s: no answer within %v%s: %w", ErrEtcdUnreachable, o.endpoints(), requestTimeout, o.noCertHint(), err)
	}
	for _, w := range unreachableWords {
		if strings.Contains(msg, w) {
			return fmt.Errorf("%w at %s%s: %w", ErrEtcdUnreachable, o.endpoints(), o.noCertHint(), err)
		}
	}
	return err
}

// noCertHint is said of a connection closed under TLS without a client certificate:
// over TLS 1.3 etcd's refusal may reach us as a broken pipe rather than an alert.
func (o EtcdOptions) noCertHint() string {
	if o.CAFile != "" && o.CertFile == "" {
		return " (if etcd checks client certificates, set --etcd-certfile and --etcd-keyfile)"
	}
	return ""
}

// isTransportError reports words of a connection that broke after it was made.
func isTransportError(msg string) bool {
	for _, w := range []string{"broken pipe", "connection reset", "EOF", "server preface"} {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}

func (o EtcdOptions) roleHint() string {
	return "its roles must grant read on " + o.configKey() + " and readwrite on the keys under " + o.subnetsDir() + " (see README.md)"
}

func (o EtcdOptions) endpoints() string { return strings.Join(o.Endpoints, ",") }

// isV2NoCredentials reports etcd's v2 answer to a request its auth does not allow:
// error 110 "Insufficient credentials", the same for a wrong password and a missing
// permission.
func isV2NoCredentials(err error) bool { return errCode(err) == client.ErrorCodeUnauthorized }
