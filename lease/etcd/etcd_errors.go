package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	client "go.etcd.io/etcd/client/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The causes an etcd call can fail for that an operator must act on. Errors from the
// registries wrap one of them (errors.Is) with a hint naming the flag or the role to
// look at, and keep the client library's own words after it.
var (
	// ErrUnreachable: no connection to any endpoint (refused, no route, no answer).
	ErrUnreachable = errors.New("no connection to etcd")
	// ErrTLS: the TLS handshake failed, on either side.
	ErrTLS = errors.New("etcd TLS handshake failed")
	// ErrAuth: etcd rejected the user name and password, or wants some.
	ErrAuth = errors.New("etcd authentication failed")
	// ErrPermission: the user's roles do not grant the key.
	ErrPermission = errors.New("etcd permission denied")
)

// tlsCause is one TLS failure recognised by the words the Go TLS stack uses; gRPC
// passes connection errors on only as text.
type tlsCause struct {
	match string
	hint  func(o Options) string
}

var tlsCauses = []tlsCause{
	{"certificate signed by unknown authority", func(o Options) string {
		if o.CAFile == "" {
			return "etcd's certificate is not signed by a CA this host trusts (set --etcd-cafile)"
		}
		return "etcd's certificate is not signed by the CA in --etcd-cafile=" + o.CAFile
	}},
	{"certificate has expired or is not yet valid", func(Options) string {
		return "etcd's certificate has expired or is not yet valid"
	}},
	{"certificate is valid for", func(Options) string {
		return "etcd's certificate does not name the host of the endpoint"
	}},
	{"remote error: tls:", func(o Options) string {
		h := "etcd refused our client certificate (--etcd-certfile=" + o.CertFile + ")"
		if o.CertFile == "" {
			h = "etcd wants a client certificate (set --etcd-certfile and --etcd-keyfile)"
		}
		if !o.certNotAfter.IsZero() && time.Now().After(o.certNotAfter) {
			h += "; it expired at " + o.certNotAfter.UTC().Format(time.RFC3339)
		}
		return h
	}},
	{"first record does not look like a TLS handshake", func(Options) string {
		return "the endpoint does not speak TLS (use http://)"
	}},
	{"server gave HTTP response to HTTPS client", func(Options) string {
		return "the endpoint does not speak TLS (use http://)"
	}},
	{"tls:", func(Options) string { return "TLS error" }},
	{"x509:", func(Options) string { return "certificate error" }},
}

var unreachableWords = []string{
	"connection refused", "no route to host", "network is unreachable", "no such host",
	"i/o timeout", "connection reset", "broken pipe", "EOF", "server preface",
	"context deadline exceeded", "etcd cluster is unavailable",
}

// etcdError is an etcd call's failure with its cause named: the sentinels it is
// (errors.Is), our words on what to check, then the client library's own words.
type etcdError struct {
	causes []error
	what   string
	err    error
}

func (e *etcdError) Error() string {
	var b strings.Builder
	for i, c := range e.causes {
		if i > 0 {
			b.WriteString(" or ")
		}
		b.WriteString(c.Error())
	}
	return b.String() + " " + e.what + ": " + e.err.Error()
}

func (e *etcdError) Unwrap() []error { return append(slices.Clip(e.causes), e.err) }

// summary is the error without the library's words, which vary from one attempt to
// the next (ports, which of gRPC's layers noticed): the same summary is the same cause.
func (e *etcdError) summary() string {
	s := e.Error()
	return s[:len(s)-len(e.err.Error())]
}

// errorSummary is err's summary when it is an etcdError, else its text.
func errorSummary(err error) string {
	var ee *etcdError
	if errors.As(err, &ee) {
		return ee.summary()
	}
	return err.Error()
}

// explain wraps err, from an etcd call about key, in the sentinel of its cause. Errors
// of other kinds (etcd's answers about keys, cancellation) come back unchanged.
func (o Options) explain(err error, key string) error {
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
	wrap := func(what string, causes ...error) error { return &etcdError{causes: causes, what: what, err: err} }
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return wrap(fmt.Sprintf("for user %q: check --etcd-username and --etcd-password", o.Username), ErrAuth)
	case errors.Is(err, rpctypes.ErrUserEmpty), errors.Is(err, rpctypes.ErrUserNotFound):
		return wrap("at "+o.endpoints()+": etcd wants a known user (--etcd-username/--etcd-password, or a client certificate whose CN is an etcd user)", ErrAuth)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return wrap(fmt.Sprintf("for user %s on %s: %s", user, key, o.roleHint()), ErrPermission)
	case isV2NoCredentials(err):
		return wrap(fmt.Sprintf("(the v2 API does not say which) for user %s on %s: check --etcd-username and --etcd-password; %s", user, key, o.roleHint()),
			ErrAuth, ErrPermission)
	}
	for _, c := range tlsCauses {
		if strings.Contains(msg, c.match) {
			return wrap("at "+o.endpoints()+": "+c.hint(o), ErrTLS)
		}
	}
	if o.tlsCfg != nil && isTransportError(msg) {
		if perr := probeTLS(context.Background(), o.Endpoints, o.tlsCfg); perr != nil {
			for _, c := range tlsCauses {
				if strings.Contains(perr.Error(), c.match) {
					return &etcdError{causes: []error{ErrTLS}, what: "at " + o.endpoints() + ": " + c.hint(o),
						err: fmt.Errorf("%w (the connection broke: %w)", perr, err)}
				}
			}
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
		return wrap(fmt.Sprintf("at %s: no answer within %v%s", o.endpoints(), requestTimeout, o.noCertHint()), ErrUnreachable)
	}
	for _, w := range unreachableWords {
		if strings.Contains(msg, w) {
			hint := o.noCertHint()
			if o.tlsCfg == nil && o.CAFile == "" && isTransportError(msg) {
				hint = " (if etcd serves TLS, use https:// endpoints and --etcd-cafile)"
			}
			return wrap("at "+o.endpoints()+hint, ErrUnreachable)
		}
	}
	return err
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

func (o Options) roleHint() string {
	return "its roles must grant read on " + o.configKey() + " and readwrite on the keys under " + o.subnetsDir() + " (see docs/operations.md)"
}

func (o Options) endpoints() string { return strings.Join(o.Endpoints, ",") }

// isV2NoCredentials reports etcd's v2 answer to a request its auth does not allow:
// error 110 "Insufficient credentials", the same for a wrong password and a missing
// permission.
func isV2NoCredentials(err error) bool { return errCode(err) == client.ErrorCodeUnauthorized }

// noCertHint is said of a connection closed under TLS without a client certificate:
// over TLS 1.3 etcd's refusal may reach us as a broken pipe rather than an alert.
func (o Options) noCertHint() string {
	if o.CAFile != "" && o.CertFile == "" {
		return " (if etcd checks client certificates, set --etcd-certfile and --etcd-keyfile)"
	}
	return ""
}
