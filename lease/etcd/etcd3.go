package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"

	"github.com/weftnet/weft/lease"
)

// etcd3 keeps leases as flanneld v0.28 does on the v3 API: one etcd lease per subnet
// key, created in a transaction on version == 0.
//
// With a user name, clientv3.New authenticates before it returns and, without a dial
// timeout, waits for ever without a word while etcd cannot be reached or refuses the
// TLS handshake. So the registry starts with a client without credentials (no I/O)
// and logs in through it first, failing fast with the cause; only then does it make
// the client that holds the credentials (and renews the token).
type etcd3 struct {
	opts Options
	cfg  clientv3.Config
	log  *zap.Logger
	bare *clientv3.Client // no credentials: login and probes

	mu  sync.Mutex // serialises logins
	cli atomic.Pointer[clientv3.Client]
}

func newEtcd3(opts Options, tlsCfg *tls.Config, log *zap.Logger) (*etcd3, error) {
	cfg := clientv3.Config{
		Endpoints:   opts.Endpoints,
		TLS:         tlsCfg,
		DialTimeout: 0, // non-blocking: etcd may be down at start
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			// gRPC's default reconnect backoff grows to 2 min: too slow to notice
			// etcd back, or a certificate fixed, after a long outage.
			Backoff:           grpcbackoff.Config{BaseDelay: time.Second, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 30 * time.Second},
			MinConnectTimeout: 20 * time.Second,
		})},
		Logger: log.Named("etcd-client").WithOptions(zap.IncreaseLevel(zap.ErrorLevel)),
	}
	bare, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd v3 client: %w", err)
	}
	e := &etcd3{opts: opts, cfg: cfg, log: log, bare: bare}
	if opts.Username == "" {
		e.cli.Store(bare)
	}
	return e, nil
}

func (e *etcd3) Close() error {
	if c := e.cli.Load(); c != nil && c != e.bare {
		c.Close()
	}
	return e.bare.Close()
}

// client returns the client with our credentials, logging in first if need be.
func (e *etcd3) client(ctx context.Context) (*clientv3.Client, error) {
	if c := e.cli.Load(); c != nil {
		return c, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.cli.Load(); c != nil {
		return c, nil
	}
	lctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	// The raw call fails fast (no wait for a ready connection) and keeps gRPC's words
	// for why the connection failed, which clientv3 drops on a deadline.
	_, err := pb.NewAuthClient(e.bare.ActiveConnection()).Authenticate(lctx,
		&pb.AuthenticateRequest{Name: e.opts.Username, Password: e.opts.Password}, grpc.WaitForReady(false))
	if err = rpctypes.Error(err); err != nil && !errors.Is(err, rpctypes.ErrAuthNotEnabled) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, e.opts.explain(err, "login")
	}
	cfg := e.cfg
	cfg.Username, cfg.Password = e.opts.Username, e.opts.Password
	cfg.DialTimeout = requestTimeout // bounds its own login
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, e.opts.explain(err, "login")
	}
	e.cli.Store(c)
	e.log.Debug("logged in to etcd", zap.String("user", e.opts.Username))
	return c, nil
}

// Config reads <prefix>/config with one bounded attempt that fails fast and names why
// etcd could not answer.
func (e *etcd3) Config(ctx context.Context) ([]byte, error) {
	cli, err := e.client(ctx)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	key := e.opts.configKey()
	resp, err := pb.NewKVClient(cli.ActiveConnection()).Range(rctx, &pb.RangeRequest{Key: []byte(key)}, grpc.WaitForReady(false))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, e.opts.explain(err, key)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%w at %s", ErrNoConfig, key)
	}
	return resp.Kvs[0].Value, nil
}

func (e *etcd3) List(ctx context.Context) (Listing, error) {
	cli, err := e.client(ctx)
	if err != nil {
		return Listing{}, err
	}
	resp, err := cli.Get(ctx, e.opts.subnetsDir(), clientv3.WithPrefix())
	if err != nil {
		return Listing{}, e.opts.explain(err, e.opts.subnetsDir())
	}
	l := Listing{Rev: resp.Header.Revision}
	for _, kv := range resp.Kvs {
		subnet, subnet6, err := lease.ParseLeaseKey(string(kv.Key))
		if err != nil {
			e.log.Error("skipping malformed subnet key", zap.ByteString("key", kv.Key), zap.Error(err))
			continue
		}
		a, err := decodeLease(e.log, string(kv.Key), kv.Value)
		if err != nil {
			e.log.Error("skipping malformed lease", zap.ByteString("key", kv.Key), zap.Error(err))
			l.Unreadable = append(l.Unreadable, lease.Key{Subnet: subnet, IPv6Subnet: subnet6})
			continue
		}
		l.Leases = append(l.Leases, lease.Lease{Subnet: subnet, IPv6Subnet: subnet6, Attrs: a, Reserved: kv.Lease == 0})
	}
	return l, nil
}

func (e *etcd3) key(k lease.Key) string { return e.opts.subnetsDir() + k.String() }

func (e *etcd3) Create(ctx context.Context, k lease.Key, a lease.Attrs, ttl time.Duration) (time.Time, error) {
	cli, key, val, err := e.begin(ctx, k, a)
	if err != nil {
		return time.Time{}, err
	}
	exp, err := e.putLeased(ctx, cli, key, val, clientv3.Compare(clientv3.Version(key), "=", 0), ttl,
		fmt.Errorf("%w: %v", ErrTaken, k))
	return exp, err
}

func (e *etcd3) Update(ctx context.Context, k lease.Key, a lease.Attrs, ttl time.Duration) (time.Time, error) {
	cli, key, val, err := e.begin(ctx, k, a)
	if err != nil {
		return time.Time{}, err
	}
	cur, err := cli.Get(ctx, key)
	if err != nil {
		return time.Time{}, e.opts.explain(err, key)
	}
	if len(cur.Kvs) == 0 {
		return time.Time{}, fmt.Errorf("%w: %v", ErrNotFound, k)
	}
	old := cur.Kvs[0]
	exp, err := e.putLeased(ctx, cli, key, val, clientv3.Compare(clientv3.ModRevision(key), "=", old.ModRevision), ttl,
		fmt.Errorf("%w: %v changed while renewing", ErrNotFound, k))
	if err != nil {
		return time.Time{}, err
	}
	if old.Lease != 0 {
		if _, err := cli.Revoke(ctx, clientv3.LeaseID(old.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			e.log.Warn("could not revoke the previous etcd lease", zap.Error(err))
		}
	}
	return exp, nil
}

// begin encodes a lease's attributes and finds the client and the etcd key to write.
func (e *etcd3) begin(ctx context.Context, k lease.Key, a lease.Attrs) (*clientv3.Client, string, string, error) {
	val, err := lease.EncodeAttrs(a)
	if err != nil {
		return nil, "", "", err
	}
	cli, err := e.client(ctx)
	if err != nil {
		return nil, "", "", err
	}
	return cli, e.key(k), string(val), nil
}

// putLeased writes val at key under a new etcd lease of ttl if cmp holds, and returns
// when that lease expires. When cmp does not hold the error is lost; on any failure the
// new etcd lease is revoked. A ttl of 0 writes the key without a lease (a reservation)
// and returns the zero time.
func (e *etcd3) putLeased(ctx context.Context, cli *clientv3.Client, key, val string, cmp clientv3.Cmp, ttl time.Duration, lost error) (time.Time, error) {
	if ttl <= 0 {
		resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, val)).Commit()
		if err == nil && !resp.Succeeded {
			err = lost
		}
		if err != nil {
			return time.Time{}, e.opts.explain(err, key)
		}
		return time.Time{}, nil
	}
	grant, err := cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return time.Time{}, e.opts.explain(err, key)
	}
	resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, val, clientv3.WithLease(grant.ID))).Commit()
	if err == nil && !resp.Succeeded {
		err = lost
	}
	if err != nil {
		_, _ = cli.Revoke(context.WithoutCancel(ctx), grant.ID)
		return time.Time{}, e.opts.explain(err, key)
	}
	return time.Now().Add(time.Duration(grant.TTL) * time.Second), nil
}

func (e *etcd3) Delete(ctx context.Context, k lease.Key) error {
	cli, err := e.client(ctx)
	if err != nil {
		return err
	}
	_, err = cli.Delete(ctx, e.key(k))
	return e.opts.explain(err, e.key(k))
}

func (e *etcd3) Watch(ctx context.Context, rev int64, changes func([]Change)) error {
	cli, err := e.client(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrGap, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := cli.Watch(clientv3.WithRequireLeader(ctx), e.opts.subnetsDir(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for resp := range wch {
		if resp.CompactRevision != 0 {
			return fmt.Errorf("%w: compacted at revision %d", ErrGap, resp.CompactRevision)
		}
		if err := resp.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrGap, e.opts.explain(err, e.opts.subnetsDir()))
		}
		batch := make([]Change, 0, len(resp.Events))
		for _, ev := range resp.Events {
			subnet, subnet6, err := lease.ParseLeaseKey(string(ev.Kv.Key))
			if err != nil {
				e.log.Error("skipping malformed subnet key", zap.ByteString("key", ev.Kv.Key), zap.Error(err))
				continue
			}
			if ev.Type == clientv3.EventTypeDelete {
				batch = append(batch, Change{Type: lease.Removed, Lease: lease.Lease{Subnet: subnet, IPv6Subnet: subnet6}})
				continue
			}
			a, err := decodeLease(e.log, string(ev.Kv.Key), ev.Kv.Value)
			l := lease.Lease{Subnet: subnet, IPv6Subnet: subnet6, Attrs: a, Reserved: ev.Kv.Lease == 0}
			batch = append(batch, Change{Type: lease.Added, Lease: l, Bad: err})
		}
		if len(batch) > 0 {
			changes(batch)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w: watch channel closed", ErrGap)
}

// conn is the connection in use: the logged-in client's, else the bare one's.
func (e *etcd3) conn() *grpc.ClientConn {
	if c := e.cli.Load(); c != nil {
		return c.ActiveConnection()
	}
	return e.bare.ActiveConnection()
}

func (e *etcd3) connState() connectivity.State { return e.conn().GetState() }

func (e *etcd3) waitConnChange(ctx context.Context, s connectivity.State) bool {
	return e.conn().WaitForStateChange(ctx, s)
}
