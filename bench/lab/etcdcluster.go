package lab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/bench/testpki"
)

// EtcdMember is one member of a lab's etcd cluster (Spec.EtcdCluster) and the host
// whose namespace it runs in. Server.Kill and Server.Restart crash and revive it.
type EtcdMember struct {
	Host   *Host
	Server *etcdproc.Server
}

// EtcdTLS is where the certificates of a lab's TLS etcd (Spec.EtcdTLS) are: the CA
// that signed the servers' and every client's certificate, and a client certificate
// etcd accepts. The daemons the lab starts get them as --etcd-cafile,
// --etcd-certfile and --etcd-keyfile.
type EtcdTLS struct {
	CAFile, CertFile, KeyFile string
}

// Config is a client TLS config with these files.
func (e *EtcdTLS) Config() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(e.CertFile, e.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("etcd client certificate: %w", err)
	}
	pem, err := os.ReadFile(e.CAFile)
	if err != nil {
		return nil, fmt.Errorf("etcd CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("etcd CA %s: no certificate", e.CAFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// startEtcd runs the lab's etcd: one member on the router, or with Spec.EtcdCluster
// one member per host of the spec, each on its host's address.
func (l *Lab) startEtcd(ctx context.Context) error {
	var where []etcdproc.Options
	if l.spec.EtcdCluster {
		for _, h := range l.hosts {
			where = append(where, etcdproc.Options{
				Binary: l.spec.EtcdBinary, Netns: h.NS.Name, Host: h.Addr.String(), Port: 2379,
				Name: h.Name, Dir: filepath.Join(l.dir, "etcd-"+h.Name),
			})
		}
	} else {
		where = []etcdproc.Options{{
			Binary: l.spec.EtcdBinary, Netns: l.router.Name, Host: "192.0.2.1", Port: 2379,
			Dir: l.dir + "/etcd",
		}}
	}
	if l.spec.EtcdTLS {
		srv, err := l.makePKI(where)
		if err != nil {
			return fmt.Errorf("lab etcd: %w", err)
		}
		for i := range where {
			where[i].TLS = srv
		}
	}
	if !l.spec.EtcdCluster {
		s, err := etcdproc.Start(ctx, where[0])
		if err != nil {
			return fmt.Errorf("lab etcd: %w", err)
		}
		l.etcd = s
		l.endpoints = []string{s.Endpoint()}
		return nil
	}
	servers, err := etcdproc.StartCluster(ctx, where)
	if err != nil {
		return fmt.Errorf("lab etcd cluster: %w", err)
	}
	for i, s := range servers {
		l.members = append(l.members, EtcdMember{Host: l.hosts[i], Server: s})
		l.endpoints = append(l.endpoints, s.Endpoint())
	}
	return nil
}

// makePKI makes a CA in the lab's directory, a server certificate for every
// address of where and a client certificate; it returns etcd's TLS settings.
func (l *Lab) makePKI(where []etcdproc.Options) (*etcdproc.TLS, error) {
	dir := filepath.Join(l.dir, "etcd-pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := testpki.NewCA(dir, "etcd-ca")
	if err != nil {
		return nil, err
	}
	var ips []net.IP
	for _, o := range where {
		ips = append(ips, net.ParseIP(o.Host))
	}
	// Client auth too: etcd's JSON gateway, which Put and Leases use, dials etcd
	// with the server's certificate.
	srv, err := ca.Issue(testpki.Spec{Name: "etcd-server", Server: true, Client: true, IPs: ips})
	if err != nil {
		return nil, err
	}
	cli, err := ca.Issue(testpki.Spec{Name: "etcd-client", CN: "weft-lab", Client: true})
	if err != nil {
		return nil, err
	}
	l.tls = &EtcdTLS{CAFile: ca.CertFile, CertFile: cli.CertFile, KeyFile: cli.KeyFile}
	return &etcdproc.TLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile, TrustedCAFile: ca.CertFile, ClientCertAuth: true}, nil
}

// EtcdEndpoints are the client URLs of the lab's etcd: EtcdEndpoint for the single
// member on the router (https:// with Spec.EtcdTLS), or one per member of a cluster,
// in host order. Daemons the lab starts get them all. Nil without etcd.
func (l *Lab) EtcdEndpoints() []string { return append([]string(nil), l.endpoints...) }

// EtcdMembers returns the members of the lab's etcd cluster (Spec.EtcdCluster), in
// host order; nil for a lab with a single etcd.
func (l *Lab) EtcdMembers() []EtcdMember { return append([]EtcdMember(nil), l.members...) }

// EtcdTLS returns the certificates of the lab's TLS etcd, or nil without
// Spec.EtcdTLS.
func (l *Lab) EtcdTLS() *EtcdTLS { return l.tls }

// etcdFlags are the daemon flags that point at the lab's etcd.
func (l *Lab) etcdFlags() []string {
	flags := []string{"--etcd-endpoints=" + strings.Join(l.endpoints, ",")}
	if l.tls != nil {
		flags = append(flags, "--etcd-cafile="+l.tls.CAFile, "--etcd-certfile="+l.tls.CertFile, "--etcd-keyfile="+l.tls.KeyFile)
	}
	return flags
}
