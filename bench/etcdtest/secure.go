package etcdtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	client "go.etcd.io/etcd/client/v2"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/bench/testpki"
)

// Users and passwords SetupAuth makes.
const (
	RootPassword   = "root-secret"
	WeftdUser      = "weftd"
	WeftdPassword  = "weftd-secret"
	OutsiderUser   = "outsider" // holds the weftd role for another prefix only
	OutsiderSecret = "outsider-secret"
	ReaderUser     = "reader" // may read the config and nothing else
	ReaderSecret   = "reader-secret"
)

// Secure is an etcd that serves clients only over TLS and only with a client
// certificate signed by CA, and the certificates to reach it.
type Secure struct {
	*etcdproc.Server
	Dir    string
	CA     *testpki.CA
	Admin  testpki.Pair // client certificate with CN root
	Client testpki.Pair // client certificate for weftd, CN weftd-host (no etcd user)
	NS     *netns.NS    // etcd runs in this namespace (127.0.0.1:2379 there); nil: here
}

// StartSecure runs a TLS etcd with client certificate checks for t.
func StartSecure(t testing.TB) *Secure { t.Helper(); return StartSecureIn(t, nil) }

// StartSecureIn is StartSecure inside ns (nil: this namespace); the admin clients
// dial into it.
func StartSecureIn(t testing.TB, ns *netns.NS) *Secure {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real etcd server; skipped with -short")
	}
	testenv.NeedTools(t, "etcd")
	dir := t.TempDir()
	ca, err := testpki.NewCA(dir, "etcd-ca")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Issue(testpki.Spec{Name: "etcd-server", Server: true})
	if err != nil {
		t.Fatal(err)
	}
	s := &Secure{Dir: dir, CA: ca, NS: ns}
	if s.Admin, err = ca.Issue(testpki.Spec{Name: "admin", CN: "root", Client: true}); err != nil {
		t.Fatal(err)
	}
	if s.Client, err = ca.Issue(testpki.Spec{Name: "weftd-client", CN: "weftd-host", Client: true}); err != nil {
		t.Fatal(err)
	}
	opts := etcdproc.Options{TLS: &etcdproc.TLS{
		CertFile: srv.CertFile, KeyFile: srv.KeyFile, TrustedCAFile: ca.CertFile, ClientCertAuth: true,
	}}
	if ns != nil {
		opts.Netns = ns.Name
	}
	s.Server, err = etcdproc.Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("etcd with TLS: %v", err)
	}
	testenv.OnInterrupt(t, "etcd", func() error { s.Close(); return nil })
	t.Cleanup(s.Close)
	return s
}

// AdminTLS is a client TLS config with the admin certificate.
func (s *Secure) AdminTLS(t testing.TB) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(s.Admin.CertFile, s.Admin.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(s.CA.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// V3 is a v3 client as root (before SetupAuth: no auth needed).
func (s *Secure) V3(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{
		Endpoints: []string{s.Endpoint()}, TLS: s.AdminTLS(t), DialTimeout: 10 * time.Second,
		Username: "root", Password: RootPassword, Logger: zap.NewNop(),
	}
	if s.NS != nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return s.NS.DialContext(ctx, "tcp", addr)
		})}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcd v3 admin client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// V2 is a v2 keys client as root.
func (s *Secure) V2(t testing.TB) client.Client {
	t.Helper()
	c, err := client.New(client.Config{
		Endpoints: []string{s.Endpoint()},
		Transport: s.transport(t),
		Username:  "root", Password: RootPassword,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (s *Secure) transport(t testing.TB) *http.Transport {
	tr := &http.Transport{TLSClientConfig: s.AdminTLS(t)}
	if s.NS != nil {
		tr.DialContext = s.NS.DialContext
	}
	return tr
}

// SetupAuth enables authentication on both APIs (they are separate in etcd 3.4) with
// four users: root, WeftdUser with the least-privilege role of docs/operations.md for prefix,
// OutsiderUser with that role for another prefix only, and ReaderUser who may read
// the config but no lease. On the v2 API the guest
// role, which may do anything, loses its rights.
func (s *Secure) SetupAuth(t testing.TB, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := s.V3(t)
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("etcd auth setup: %s: %v", what, err)
		}
	}
	_, err := cli.UserAdd(ctx, "root", RootPassword)
	step("v3 add root", err)
	_, err = cli.UserGrantRole(ctx, "root", "root")
	step("v3 grant root", err)
	for _, u := range []struct{ name, pw, prefix string }{
		{WeftdUser, WeftdPassword, prefix}, {OutsiderUser, OutsiderSecret, prefix + "-other"},
	} {
		role := u.name + "-role"
		step("v3 role", GrantWeftdRoleV3(ctx, cli, role, u.prefix))
		_, err = cli.UserAdd(ctx, u.name, u.pw)
		step("v3 add "+u.name, err)
		_, err = cli.UserGrantRole(ctx, u.name, role)
		step("v3 grant "+u.name, err)
	}
	_, err = cli.RoleAdd(ctx, "reader-role")
	step("v3 reader role", err)
	_, err = cli.RoleGrantPermission(ctx, "reader-role", prefix+"/config", "", clientv3.PermissionType(clientv3.PermRead))
	step("v3 reader role", err)
	_, err = cli.UserAdd(ctx, ReaderUser, ReaderSecret)
	step("v3 add reader", err)
	_, err = cli.UserGrantRole(ctx, ReaderUser, "reader-role")
	step("v3 grant reader", err)
	_, err = cli.AuthEnable(ctx)
	step("v3 auth enable", err)

	c2 := s.V2(t)
	users, roles := client.NewAuthUserAPI(c2), client.NewAuthRoleAPI(c2)
	step("v2 add root", users.AddUser(ctx, "root", RootPassword))
	for _, u := range []struct{ name, pw, prefix string }{
		{WeftdUser, WeftdPassword, prefix}, {OutsiderUser, OutsiderSecret, prefix + "-other"},
	} {
		role := u.name + "-role"
		step("v2 role", GrantWeftdRoleV2(ctx, roles, role, u.prefix))
		step("v2 add "+u.name, users.AddUser(ctx, u.name, u.pw))
		_, err = users.GrantUser(ctx, u.name, []string{role})
		step("v2 grant "+u.name, err)
	}
	step("v2 reader role", roles.AddRole(ctx, "reader-role"))
	_, err = roles.GrantRoleKV(ctx, "reader-role", []string{prefix + "/config"}, client.ReadPermission)
	step("v2 reader role", err)
	step("v2 add reader", users.AddUser(ctx, ReaderUser, ReaderSecret))
	_, err = users.GrantUser(ctx, ReaderUser, []string{"reader-role"})
	step("v2 grant reader", err)
	step("v2 auth enable", client.NewAuthAPI(c2).Enable(ctx))
	_, err = roles.RevokeRoleKV(ctx, "guest", []string{"/*"}, client.ReadWritePermission)
	step("v2 revoke guest", err)
}

// GrantWeftdRoleV3 makes role with exactly what weftd (and flanneld) need under prefix
// on the v3 API: read <prefix>/config; read and write every key under
// <prefix>/subnets/ (list, watch, create, renew, delete leases).
func GrantWeftdRoleV3(ctx context.Context, cli *clientv3.Client, role, prefix string) error {
	if _, err := cli.RoleAdd(ctx, role); err != nil {
		return err
	}
	if _, err := cli.RoleGrantPermission(ctx, role, prefix+"/config", "", clientv3.PermissionType(clientv3.PermRead)); err != nil {
		return err
	}
	subnets := prefix + "/subnets/"
	_, err := cli.RoleGrantPermission(ctx, role, subnets, clientv3.GetPrefixRangeEnd(subnets), clientv3.PermissionType(clientv3.PermReadWrite))
	return err
}

// GrantWeftdRoleV2 is GrantWeftdRoleV3 on the v2 API, whose permissions are globs:
// read <prefix>/config; read and write <prefix>/subnets and everything below it.
func GrantWeftdRoleV2(ctx context.Context, roles client.AuthRoleAPI, role, prefix string) error {
	if err := roles.AddRole(ctx, role); err != nil {
		return err
	}
	if _, err := roles.GrantRoleKV(ctx, role, []string{prefix + "/config"}, client.ReadPermission); err != nil {
		return err
	}
	_, err := roles.GrantRoleKV(ctx, role, []string{prefix + "/subnets", prefix + "/subnets/*"}, client.ReadWritePermission)
	return err
}
