package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	client "go.etcd.io/etcd/client/v2"
	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

// etcd2 keeps leases on etcd's v2 API, as flanneld did before v0.21: key TTLs, create
// with prevExist=false, watch from an index.
type etcd2 struct {
	opts Options
	cli  client.Client
	kapi client.KeysAPI
	log  *zap.Logger
	// transport is the client's: Close closes its idle connections.
	transport *http.Transport
	state     atomic.Int32 // connectivity.State of the last probe (health_v2.go)
	// accepted is set once etcd answered a request with our credentials: a later
	// 401 then means a missing permission, not a wrong password.
	accepted atomic.Bool
}

// explain is Options.explain, told whether our credentials worked before.
func (e *etcd2) explain(err error, key string) error {
	if e.accepted.Load() && isV2NoCredentials(err) {
		return &etcdError{causes: []error{ErrPermission},
			what: fmt.Sprintf("for user %s on %s (its password was accepted): %s", e.opts.Username, key, e.opts.roleHint()), err: err}
	}
	return e.opts.explain(err, key)
}

func newEtcd2(opts Options, tlsCfg *tls.Config, log *zap.Logger) (*etcd2, error) {
	transport := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 5 * time.Second,
		TLSClientConfig:     tlsCfg,
	}
	c, err := client.New(client.Config{
		Endpoints: opts.Endpoints,
		Transport: transport,
		Username:  opts.Username,
		Password:  opts.Password,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd v2 client: %w", err)
	}
	return &etcd2{opts: opts, cli: c, kapi: client.NewKeysAPI(c), log: log, transport: transport}, nil
}

// Close closes the connections the client keeps open between requests (a request
// that ended as the daemon stopped leaves its connection idle, with two goroutines
// of net/http, until then).
func (e *etcd2) Close() error {
	e.transport.CloseIdleConnections()
	return nil
}

func errCode(err error) int {
	var ce client.Error
	if errors.As(err, &ce) {
		return ce.Code
	}
	var cp *client.Error
	if errors.As(err, &cp) {
		return cp.Code
	}
	return 0
}

func (e *etcd2) Config(ctx context.Context) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := e.kapi.Get(rctx, e.opts.configKey(), nil)
	if errCode(err) == client.ErrorCodeKeyNotFound {
		return nil, fmt.Errorf("%w at %s (v2 API)", ErrNoConfig, e.opts.configKey())
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, e.explain(err, e.opts.configKey())
	}
	e.accepted.Store(e.opts.Username != "")
	return []byte(resp.Node.Value), nil
}

func (e *etcd2) List(ctx context.Context) (Listing, error) {
	resp, err := e.kapi.Get(ctx, e.opts.subnetsDir(), &client.GetOptions{Recursive: true, Quorum: true})
	if errCode(err) == client.ErrorCodeKeyNotFound {
		var ce client.Error
		errors.As(err, &ce)
		return Listing{Rev: int64(ce.Index)}, nil
	}
	if err != nil {
		return Listing{}, e.explain(err, e.opts.subnetsDir())
	}
	l := Listing{Rev: int64(resp.Index)}
	for _, n := range resp.Node.Nodes {
		subnet, subnet6, err := lease.ParseLeaseKey(n.Key)
		if err != nil {
			e.log.Error("skipping malformed subnet key", zap.String("key", n.Key), zap.Error(err))
			continue
		}
		a, err := decodeLease(e.log, n.Key, []byte(n.Value))
		if err != nil {
			e.log.Error("skipping malformed lease", zap.String("key", n.Key), zap.Error(err))
			l.Unreadable = append(l.Unreadable, lease.Key{Subnet: subnet, IPv6Subnet: subnet6})
			continue
		}
		lease := lease.Lease{Subnet: subnet, IPv6Subnet: subnet6, Attrs: a, Reserved: n.Expiration == nil}
		if n.Expiration != nil {
			lease.Expiration = *n.Expiration
		}
		l.Leases = append(l.Leases, lease)
	}
	return l, nil
}

func (e *etcd2) key(k lease.Key) string { return e.opts.subnetsDir() + k.String() }

func (e *etcd2) set(ctx context.Context, k lease.Key, a lease.Attrs, ttl time.Duration, prev client.PrevExistType) (time.Time, error) {
	val, err := lease.EncodeAttrs(a)
	if err != nil {
		return time.Time{}, err
	}
	resp, err := e.kapi.Set(ctx, e.key(k), string(val), &client.SetOptions{PrevExist: prev, TTL: ttl})
	switch errCode(err) {
	case client.ErrorCodeNodeExist:
		return time.Time{}, fmt.Errorf("%w: %v", ErrTaken, k)
	case client.ErrorCodeKeyNotFound:
		return time.Time{}, fmt.Errorf("%w: %v", ErrNotFound, k)
	}
	if err != nil {
		return time.Time{}, e.explain(err, e.key(k))
	}
	if resp.Node.Expiration != nil {
		return *resp.Node.Expiration, nil
	}
	if ttl <= 0 {
		return time.Time{}, nil // a reservation: no TTL
	}
	return time.Now().Add(ttl), nil
}

func (e *etcd2) Create(ctx context.Context, k lease.Key, a lease.Attrs, ttl time.Duration) (time.Time, error) {
	return e.set(ctx, k, a, ttl, client.PrevNoExist)
}

func (e *etcd2) Update(ctx context.Context, k lease.Key, a lease.Attrs, ttl time.Duration) (time.Time, error) {
	return e.set(ctx, k, a, ttl, client.PrevExist)
}

func (e *etcd2) Delete(ctx context.Context, k lease.Key) error {
	_, err := e.kapi.Delete(ctx, e.key(k), nil)
	if errCode(err) == client.ErrorCodeKeyNotFound {
		return nil
	}
	return e.explain(err, e.key(k))
}

func (e *etcd2) Watch(ctx context.Context, rev int64, changes func([]Change)) error {
	w := e.kapi.Watcher(e.opts.subnetsDir(), &client.WatcherOptions{AfterIndex: uint64(rev), Recursive: true})
	for {
		resp, err := w.Next(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil { // "event index cleared" among others: list again
			if errCode(err) == client.ErrorCodeEventIndexCleared {
				return fmt.Errorf("%w: %w", ErrGap, err)
			}
			return fmt.Errorf("%w: %w", ErrGap, e.explain(err, e.opts.subnetsDir()))
		}
		if resp.Node == nil || resp.Node.Dir {
			continue
		}
		subnet, subnet6, err := lease.ParseLeaseKey(resp.Node.Key)
		if err != nil {
			e.log.Error("skipping malformed subnet key", zap.String("key", resp.Node.Key), zap.Error(err))
			continue
		}
		switch resp.Action {
		case "delete", "expire", "compareAndDelete":
			changes([]Change{{Type: lease.Removed, Lease: lease.Lease{Subnet: subnet, IPv6Subnet: subnet6}}})
		default:
			a, err := decodeLease(e.log, resp.Node.Key, []byte(resp.Node.Value))
			l := lease.Lease{Subnet: subnet, IPv6Subnet: subnet6, Attrs: a, Reserved: resp.Node.Expiration == nil}
			if resp.Node.Expiration != nil {
				l.Expiration = *resp.Node.Expiration
			}
			changes([]Change{{Type: lease.Added, Lease: l, Bad: err}})
		}
	}
}
