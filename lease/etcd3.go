package lease

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"
)

// etcd3 keeps leases as flanneld v0.28 does on the v3 API: one etcd lease per subnet
// key, created in a transaction on version == 0.
type etcd3 struct {
	opts EtcdOptions
	cli  *clientv3.Client
	log  *zap.Logger
}

func newEtcd3(opts EtcdOptions, tlsCfg *tls.Config, log *zap.Logger) (*etcd3, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   opts.Endpoints,
		TLS:         tlsCfg,
		Username:    opts.Username,
		Password:    opts.Password,
		DialTimeout: 0, // non-blocking: etcd may be down at start
		Logger:      log.Named("etcd-client").WithOptions(zap.IncreaseLevel(zap.ErrorLevel)),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd v3 client: %w", err)
	}
	return &etcd3{opts: opts, cli: cli, log: log}, nil
}

func (e *etcd3) Close() error { return e.cli.Close() }

func (e *etcd3) Config(ctx context.Context) ([]byte, error) {
	resp, err := e.cli.Get(ctx, e.opts.configKey())
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%w at %s", ErrNoConfig, e.opts.configKey())
	}
	return resp.Kvs[0].Value, nil
}

func (e *etcd3) List(ctx context.Context) (Listing, error) {
	resp, err := e.cli.Get(ctx, e.opts.subnetsDir(), clientv3.WithPrefix())
	if err != nil {
		return Listing{}, err
	}
	l := Listing{Rev: resp.Header.Revision}
	for _, kv := range resp.Kvs {
		subnet, err := ParseSubnetKey(string(kv.Key))
		if err != nil {
			e.log.Error("skipping malformed subnet key", zap.ByteString("key", kv.Key), zap.Error(err))
			continue
		}
		a, err := DecodeAttrs(kv.Value)
		if err != nil {
			e.log.Error("skipping malformed lease", zap.ByteString("key", kv.Key), zap.Error(err))
			l.Unreadable = append(l.Unreadable, subnet)
			continue
		}
		l.Leases = append(l.Leases, Lease{Subnet: subnet, Attrs: a})
	}
	return l, nil
}

func (e *etcd3) key(p netip.Prefix) string { return e.opts.subnetsDir() + SubnetKey(p) }

func (e *etcd3) Create(ctx context.Context, subnet netip.Prefix, a Attrs, ttl time.Duration) (time.Time, error) {
	val, err := EncodeAttrs(a)
	if err != nil {
		return time.Time{}, err
	}
	grant, err := e.cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return time.Time{}, err
	}
	key := e.key(subnet)
	resp, err := e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(grant.ID))).
		Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("%w: %v", ErrTaken, subnet)
	}
	if err != nil {
		_, _ = e.cli.Revoke(context.WithoutCancel(ctx), grant.ID)
		return time.Time{}, err
	}
	return time.Now().Add(time.Duration(grant.TTL) * time.Second), nil
}

func (e *etcd3) Update(ctx context.Context, subnet netip.Prefix, a Attrs, ttl time.Duration) (time.Time, error) {
	val, err := EncodeAttrs(a)
	if err != nil {
		return time.Time{}, err
	}
	key := e.key(subnet)
	cur, err := e.cli.Get(ctx, key)
	if err != nil {
		return time.Time{}, err
	}
	if len(cur.Kvs) == 0 {
		return time.Time{}, fmt.Errorf("%w: %v", ErrNotFound, subnet)
	}
	old := cur.Kvs[0]
	grant, err := e.cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return time.Time{}, err
	}
	resp, err := e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", old.ModRevision)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(grant.ID))).
		Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("%w: %v changed while renewing", ErrNotFound, subnet)
	}
	if err != nil {
		_, _ = e.cli.Revoke(context.WithoutCancel(ctx), grant.ID)
		return time.Time{}, err
	}
	if old.Lease != 0 {
		if _, err := e.cli.Revoke(ctx, clientv3.LeaseID(old.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			e.log.Warn("could not revoke the previous etcd lease", zap.Error(err))
		}
	}
	return time.Now().Add(time.Duration(grant.TTL) * time.Second), nil
}

func (e *etcd3) Delete(ctx context.Context, subnet netip.Prefix) error {
	_, err := e.cli.Delete(ctx, e.key(subnet))
	return err
}

func (e *etcd3) Watch(ctx context.Context, rev int64, changes func([]Change)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := e.cli.Watch(clientv3.WithRequireLeader(ctx), e.opts.subnetsDir(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for resp := range wch {
		if resp.CompactRevision != 0 {
			return fmt.Errorf("%w: compacted at revision %d", ErrGap, resp.CompactRevision)
		}
		if err := resp.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrGap, err)
		}
		batch := make([]Change, 0, len(resp.Events))
		for _, ev := range resp.Events {
			subnet, err := ParseSubnetKey(string(ev.Kv.Key))
			if err != nil {
				e.log.Error("skipping malformed subnet key", zap.ByteString("key", ev.Kv.Key), zap.Error(err))
				continue
			}
			if ev.Type == clientv3.EventTypeDelete {
				batch = append(batch, Change{Type: Removed, Lease: Lease{Subnet: subnet}})
				continue
			}
			a, err := DecodeAttrs(ev.Kv.Value)
			batch = append(batch, Change{Type: Added, Lease: Lease{Subnet: subnet, Attrs: a}, Bad: err})
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

func (e *etcd3) connState() connectivity.State { return e.cli.ActiveConnection().GetState() }

func (e *etcd3) waitConnChange(ctx context.Context, s connectivity.State) bool {
	return e.cli.ActiveConnection().WaitForStateChange(ctx, s)
}
