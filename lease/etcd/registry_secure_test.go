package etcd

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	client "go.etcd.io/etcd/client/v2"
	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/bench/etcdtest"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/bench/testpki"
	"github.com/weftnet/weft/lease"
)

// secureLab is one etcd over TLS with client certificates and authentication on both
// APIs, the least-privilege role of docs/operations.md for prefix, and certificates that must fail.
type secureLab struct {
	etcd   *etcdtest.Secure
	prefix string
	// otherCA signed none of etcd's certificates; stranger is a client certificate
	// from it; expired is one from etcd's CA that expired an hour ago.
	otherCA           *testpki.CA
	stranger, expired testpki.Pair
}

func newSecureLab(t *testing.T) *secureLab {
	t.Helper()
	l := &secureLab{etcd: etcdtest.StartSecure(t), prefix: "/weft-secure/" + randHex(t, 4)}
	l.etcd.SetupAuth(t, l.prefix)
	var err error
	if l.otherCA, err = testpki.NewCA(l.etcd.Dir, "other-ca"); err != nil {
		t.Fatal(err)
	}
	if l.stranger, err = l.otherCA.Issue(testpki.Spec{Name: "stranger", Client: true}); err != nil {
		t.Fatal(err)
	}
	if l.expired, err = l.etcd.CA.Issue(testpki.Spec{Name: "expired", Client: true,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 30*time.Second)
	if _, err := l.etcd.V3(t).Put(ctx, l.prefix+"/config", `{"Network":"198.18.0.0/16"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := client.NewKeysAPI(l.etcd.V2(t)).Set(ctx, l.prefix+"/config", `{"Network":"198.18.0.0/16"}`, nil); err != nil {
		t.Fatal(err)
	}
	return l
}

// good are the options weftd runs with: etcd's CA, its own certificate, its user.
func (l *secureLab) good(api string) Options {
	return Options{
		Endpoints: []string{l.etcd.Endpoint()}, Prefix: l.prefix, API: api,
		CAFile: l.etcd.CA.CertFile, CertFile: l.etcd.Client.CertFile, KeyFile: l.etcd.Client.KeyFile,
		Username: etcdtest.WeftdUser, Password: etcdtest.WeftdPassword,
	}
}

// TestRegistryTLSAndAuth runs the registry as the least-privilege user of docs/operations.md over
// TLS with a client certificate: config, create, list, watch, renew and delete work.
func TestRegistryTLSAndAuth(t *testing.T) {
	l := newSecureLab(t)
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			reg, err := NewRegistry(l.good(api), zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { reg.Close() })
			ctx := testCtx(t, 30*time.Second)
			if data, err := reg.Config(ctx); err != nil || !strings.Contains(string(data), "198.18.0.0/16") {
				t.Fatalf("Config = %q, %v", data, err)
			}
			sub := pfx("198.18.7.0/24")
			if api == "v3" {
				sub = pfx("198.18.8.0/24")
			}
			listing, err := reg.List(ctx)
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			changes := make(chan []Change, 4)
			wctx, stop := context.WithCancel(ctx)
			wdone := make(chan error, 1)
			go func() { wdone <- reg.Watch(wctx, listing.Rev, func(c []Change) { changes <- c }) }()
			t.Cleanup(func() { stop(); <-wdone })
			if _, err := reg.Create(ctx, lease.Key{Subnet: sub}, attrsA, time.Hour); err != nil {
				t.Fatalf("Create: %v", err)
			}
			select {
			case c := <-changes:
				if len(c) != 1 || c[0].Type != lease.Added || c[0].Lease.Subnet != sub {
					t.Fatalf("watch sent %+v, want %v added", c, sub)
				}
			case err := <-wdone:
				t.Fatalf("Watch ended: %v", err)
			case <-ctx.Done():
				t.Fatal("no watch event for the created lease")
			}
			if _, err := reg.Update(ctx, lease.Key{Subnet: sub}, attrsB, time.Hour); err != nil {
				t.Fatalf("Update: %v", err)
			}
			if got := leaseMap(t, reg)[sub]; !got.Attrs.Equal(attrsB) {
				t.Fatalf("after Update: %+v", got.Attrs)
			}
			if err := reg.Delete(ctx, lease.Key{Subnet: sub}); err != nil {
				t.Fatalf("Delete: %v", err)
			}
		})
	}
}

// TestRegistryTLSAndAuthFailures: each way of being refused is one error, at once,
// that wraps the cause's sentinel and names it in etcd's or Go's words.
func TestRegistryTLSAndAuthFailures(t *testing.T) {
	l := newSecureLab(t)
	cases := []struct {
		name  string
		apis  []string
		opts  func(o *Options)
		is    []error
		words []string
	}{
		{"wrong CA", apis, func(o *Options) { o.CAFile = l.otherCA.CertFile },
			[]error{ErrTLS}, []string{"certificate signed by unknown authority", "--etcd-cafile=" + l.otherCA.CertFile}},
		{"client certificate from another CA", apis, func(o *Options) { o.CertFile, o.KeyFile = l.stranger.CertFile, l.stranger.KeyFile },
			[]error{ErrTLS}, []string{"etcd refused our client certificate", "remote error: tls"}},
		{"expired client certificate", apis, func(o *Options) { o.CertFile, o.KeyFile = l.expired.CertFile, l.expired.KeyFile },
			[]error{ErrTLS}, []string{"etcd refused our client certificate", "expired at"}},
		// Over TLS 1.3 the refusal comes as an alert or a broken pipe (a race): the
		// error names the flag either way.
		{"no client certificate", apis, func(o *Options) { o.CertFile, o.KeyFile = "", "" },
			nil, []string{"--etcd-certfile and --etcd-keyfile"}},
		{"http:// to a TLS etcd", []string{"v3"}, func(o *Options) {
			o.Endpoints[0] = strings.Replace(o.Endpoints[0], "https://", "http://", 1)
			o.CAFile, o.CertFile, o.KeyFile = "", "", ""
		}, []error{ErrUnreachable}, []string{"if etcd serves TLS, use https://"}},
		{"wrong password", []string{"v3"}, func(o *Options) { o.Password = "wrong" },
			[]error{ErrAuth}, []string{"authentication failed", `user "weftd"`}},
		{"user without rights on the prefix", []string{"v3"}, func(o *Options) {
			o.Username, o.Password = etcdtest.OutsiderUser, etcdtest.OutsiderSecret
		}, []error{ErrPermission}, []string{"permission denied", l.prefix + "/config"}},
		// The v2 API answers both with the same 401 "Insufficient credentials".
		{"wrong password", []string{"v2"}, func(o *Options) { o.Password = "wrong" },
			[]error{ErrAuth, ErrPermission}, []string{"authentication failed or etcd permission denied", "Insufficient credentials"}},
		{"user without rights on the prefix", []string{"v2"}, func(o *Options) {
			o.Username, o.Password = etcdtest.OutsiderUser, etcdtest.OutsiderSecret
		}, []error{ErrAuth, ErrPermission}, []string{"authentication failed or etcd permission denied", l.prefix + "/config"}},
	}
	for _, c := range cases {
		for _, api := range c.apis {
			t.Run(c.name+"/"+api, func(t *testing.T) {
				o := l.good(api)
				c.opts(&o)
				reg, err := NewRegistry(o, zaptest.NewLogger(t))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { reg.Close() })
				_, err = reg.Config(testCtx(t, 30*time.Second))
				if err == nil {
					t.Fatal("Config succeeded")
				}
				for _, s := range c.is {
					if !errors.Is(err, s) {
						t.Errorf("error is not %v: %v", s, err)
					}
				}
				for _, w := range c.words {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error does not say %q: %v", w, err)
					}
				}
			})
		}
	}
}

// TestRegistryUnreachable: nothing listens at the endpoint; Config says so (v3: in
// gRPC's words, not a bare deadline).
func TestRegistryUnreachable(t *testing.T) {
	srv := etcdtest.Start(t)
	ep := srv.Endpoint()
	srv.Close()
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			reg, err := NewRegistry(Options{Endpoints: []string{ep}, API: api}, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { reg.Close() })
			_, err = reg.Config(testCtx(t, 30*time.Second))
			if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "connection refused") {
				t.Fatalf("Config = %v, want ErrUnreachable saying connection refused", err)
			}
		})
	}
}

// TestRegistryNoUser: etcd has authentication on and we bring no user and a client
// certificate whose CN is no etcd user.
func TestRegistryNoUser(t *testing.T) {
	l := newSecureLab(t)
	o := l.good("v3")
	o.Username, o.Password = "", ""
	reg, err := NewRegistry(o, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	_, err = reg.Config(testCtx(t, 30*time.Second))
	if !errors.Is(err, ErrAuth) && !errors.Is(err, ErrPermission) {
		t.Fatalf("Config without a user = %v, want ErrAuth or ErrPermission", err)
	}
}

// TestRegistryExpiredServerCertificate: etcd serves a certificate that expired an
// hour ago.
func TestRegistryExpiredServerCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real etcd server; skipped with -short")
	}
	testenv.NeedTools(t, "etcd")
	dir := t.TempDir()
	ca, err := testpki.NewCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := ca.Issue(testpki.Spec{Name: "server", Server: true,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := etcdproc.Start(context.Background(), etcdproc.Options{TLS: &etcdproc.TLS{CertFile: srvCert.CertFile, KeyFile: srvCert.KeyFile}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			reg, err := NewRegistry(Options{Endpoints: []string{srv.Endpoint()}, API: api, CAFile: ca.CertFile}, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { reg.Close() })
			_, err = reg.Config(testCtx(t, 30*time.Second))
			if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "etcd's certificate has expired or is not yet valid") {
				t.Fatalf("Config = %v, want ErrTLS saying etcd's certificate expired", err)
			}
		})
	}
}

// TestRegistryNoAnswer: the endpoint takes connections and never answers (a hung
// etcd, a proxy without a backend). Config gives up after one bounded attempt and
// says so.
func TestRegistryNoAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			reg, err := NewRegistry(Options{Endpoints: []string{"http://" + ln.Addr().String()}, API: api}, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { reg.Close() })
			_, err = reg.Config(testCtx(t, 30*time.Second))
			if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "no answer within") {
				t.Fatalf("Config = %v, want ErrUnreachable saying there was no answer", err)
			}
		})
	}
}

// TestRegistryClientCertificateAsUser: with --client-cert-auth etcd takes the client
// certificate's CN as the user when no password comes: weftd needs no password then.
func TestRegistryClientCertificateAsUser(t *testing.T) {
	l := newSecureLab(t)
	cert, err := l.etcd.CA.Issue(testpki.Spec{Name: "weftd-cn", CN: etcdtest.WeftdUser, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	outsider, err := l.etcd.CA.Issue(testpki.Spec{Name: "outsider-cn", CN: etcdtest.OutsiderUser, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			o := l.good(api)
			o.Username, o.Password = "", ""
			o.CertFile, o.KeyFile = cert.CertFile, cert.KeyFile
			reg, err := NewRegistry(o, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { reg.Close() })
			ctx := testCtx(t, 30*time.Second)
			if _, err := reg.Config(ctx); err != nil {
				t.Fatalf("Config as CN %s: %v", etcdtest.WeftdUser, err)
			}
			sub := pfx("198.18.9.0/24")
			if _, err := reg.Create(ctx, lease.Key{Subnet: sub}, attrsA, time.Hour); err != nil {
				t.Fatalf("Create as CN %s: %v", etcdtest.WeftdUser, err)
			}
			if err := reg.Delete(ctx, lease.Key{Subnet: sub}); err != nil {
				t.Fatal(err)
			}

			o.CertFile, o.KeyFile = outsider.CertFile, outsider.KeyFile
			reg2, err := NewRegistry(o, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { reg2.Close() })
			if _, err := reg2.Config(ctx); !errors.Is(err, ErrPermission) {
				t.Fatalf("Config as CN %s = %v, want ErrPermission", etcdtest.OutsiderUser, err)
			}
		})
	}
}
