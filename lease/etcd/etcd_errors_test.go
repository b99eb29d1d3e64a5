package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	client "go.etcd.io/etcd/client/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestExplain classifies the errors the etcd clients give, in their own words, as
// the live tests (registry_secure_test.go) saw them.
func TestExplain(t *testing.T) {
	o := Options{Endpoints: []string{"https://etcd:2379"}, Prefix: "/p", CAFile: "/ca.crt",
		CertFile: "/c.crt", Username: "weftd", certNotAfter: time.Now().Add(-time.Hour)}
	unavailable := func(msg string) error { return status.Error(codes.Unavailable, msg) }
	cases := []struct {
		name  string
		err   error
		is    []error
		words []string
	}{
		{"unknown authority (v3)", unavailable(`connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`),
			[]error{ErrTLS}, []string{"not signed by the CA in --etcd-cafile=/ca.crt"}},
		{"unknown authority (v2)", &client.ClusterError{Errors: []error{errors.New("tls: failed to verify certificate: x509: certificate signed by unknown authority")}},
			[]error{ErrTLS}, []string{"not signed by the CA"}},
		{"expired server certificate", unavailable("x509: certificate has expired or is not yet valid: current time"),
			[]error{ErrTLS}, []string{"etcd's certificate has expired"}},
		{"client certificate refused", unavailable(`connection error: desc = "error reading server preface: remote error: tls: bad certificate"`),
			[]error{ErrTLS}, []string{"etcd refused our client certificate (--etcd-certfile=/c.crt); it expired at"}},
		{"wrong password", rpctypes.ErrGRPCAuthFailed,
			[]error{ErrAuth, rpctypes.ErrAuthFailed}, []string{`for user "weftd"`, "--etcd-password"}},
		{"permission denied", rpctypes.ErrPermissionDenied,
			[]error{ErrPermission}, []string{"on /p/config", "read on /p/config", "readwrite on the keys under /p/subnets/"}},
		{"v2 insufficient credentials", client.Error{Code: client.ErrorCodeUnauthorized, Message: "The request requires user authentication", Cause: "Insufficient credentials"},
			[]error{ErrAuth, ErrPermission}, []string{"the v2 API does not say which"}},
		{"refused", unavailable("dial tcp 127.0.0.1:2379: connect: connection refused"),
			[]error{ErrUnreachable}, []string{"no connection to etcd at https://etcd:2379"}},
		{"no answer (v3)", status.Error(codes.DeadlineExceeded, "context deadline exceeded"),
			[]error{ErrUnreachable}, []string{"no answer within"}},
		{"no answer (v2)", fmt.Errorf("get: %w", context.DeadlineExceeded),
			[]error{ErrUnreachable}, []string{"no answer within"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := o.explain(c.err, "/p/config")
			for _, s := range c.is {
				if !errors.Is(err, s) {
					t.Errorf("not %v: %v", s, err)
				}
			}
			for _, w := range c.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("does not say %q: %v", w, err)
				}
			}
		})
	}
	// Left alone: etcd's answers about keys, and cancellation.
	for _, err := range []error{rpctypes.ErrLeaseNotFound, context.Canceled, ErrNoConfig} {
		if got := o.explain(err, "k"); got != err && !errors.Is(got, err) {
			t.Errorf("explain(%v) = %v", err, got)
		}
		if got := o.explain(err, "k"); errors.Is(got, ErrTLS) || errors.Is(got, ErrUnreachable) {
			t.Errorf("explain(%v) = %v, classified", err, got)
		}
	}
}
