package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	client "go.etcd.io/etcd/client/v2"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/weftnet/weft/lease"
)

// ErrMigrateConflict is wrapped when the v3 keyspace already holds a different value
// under a key the migration would copy.
var ErrMigrateConflict = errors.New("v3 already holds a different value")

// MigrateAction is what the migration did, or would do, with one key.
type MigrateAction string

const (
	MigrateCopied   MigrateAction = "copied"    // written to v3 (or would be, dry run)
	MigrateSame     MigrateAction = "unchanged" // v3 already holds the same value
	MigrateConflict MigrateAction = "conflict"  // v3 holds something else: left alone
	MigrateSkipped  MigrateAction = "skipped"   // not a subnet key: not copied
)

// MigrateStep is one key of the migration.
type MigrateStep struct {
	Key    string
	Action MigrateAction
	TTL    time.Duration // the lease's remaining time on v2 (0: the key has none)
	Note   string
}

// MigrateV2ToV3 copies the network config and the live leases under opts.Prefix from
// etcd's v2 keyspace to its v3 keyspace, byte for byte, each lease key with an etcd
// lease of the TTL it has left on v2, created only where the key does not exist (in a
// transaction, as weftd and flanneld create leases). Keys v3 already holds with the
// same value are left as they are, so a second run changes nothing; keys v3 holds
// with another value are reported as conflicts and left alone. With dryRun nothing is
// written. The error wraps ErrMigrateConflict when there were conflicts.
func MigrateV2ToV3(ctx context.Context, opts Options, dryRun bool, log *zap.Logger) ([]MigrateStep, error) {
	if opts.Prefix == "" {
		opts.Prefix = lease.DefaultPrefix
	}
	opts.Prefix = "/" + strings.Trim(opts.Prefix, "/")
	tlsCfg, err := opts.tls()
	if err != nil {
		return nil, err
	}
	v2, err := newEtcd2(opts, tlsCfg, log)
	if err != nil {
		return nil, err
	}
	v3, err := newEtcd3(opts, tlsCfg, log)
	if err != nil {
		return nil, err
	}
	defer v3.Close()
	cli, err := v3.client(ctx)
	if err != nil {
		return nil, err
	}

	var steps []MigrateStep
	cfg, err := v2.kapi.Get(ctx, opts.configKey(), &client.GetOptions{Quorum: true})
	if err != nil {
		return nil, fmt.Errorf("v2 %s: %w", opts.configKey(), v2.explain(err, opts.configKey()))
	}
	if _, err := lease.ParseConfig([]byte(cfg.Node.Value)); err != nil {
		return nil, fmt.Errorf("v2 %s: %w", opts.configKey(), err)
	}
	step, err := copyKey(ctx, cli, cfg.Node, dryRun)
	if err != nil {
		return nil, err
	}
	steps = append(steps, step)
	if step.Action == MigrateConflict {
		return steps, fmt.Errorf("%w: %s: the networks differ; leases not copied", ErrMigrateConflict, opts.configKey())
	}

	list, err := v2.kapi.Get(ctx, opts.subnetsDir(), &client.GetOptions{Recursive: true, Quorum: true})
	if errCode(err) == client.ErrorCodeKeyNotFound {
		return steps, nil
	}
	if err != nil {
		return steps, fmt.Errorf("v2 %s: %w", opts.subnetsDir(), v2.explain(err, opts.subnetsDir()))
	}
	conflicts := 0
	for _, n := range list.Node.Nodes {
		if _, _, err := lease.ParseLeaseKey(n.Key); err != nil || n.Dir {
			steps = append(steps, MigrateStep{Key: n.Key, Action: MigrateSkipped, Note: "not a subnet lease"})
			continue
		}
		step, err := copyKey(ctx, cli, n, dryRun)
		if err != nil {
			return steps, err
		}
		if step.Action == MigrateConflict {
			conflicts++
		}
		steps = append(steps, step)
	}
	if conflicts > 0 {
		return steps, fmt.Errorf("%w under %d lease keys: left alone", ErrMigrateConflict, conflicts)
	}
	return steps, nil
}

// copyKey puts the v2 node's value under the same key in v3 unless v3 has the key
// already; a node with a TTL gets an etcd lease of the time it has left.
func copyKey(ctx context.Context, cli *clientv3.Client, n *client.Node, dryRun bool) (MigrateStep, error) {
	step := MigrateStep{Key: n.Key, TTL: time.Duration(n.TTL) * time.Second}
	have, err := cli.Get(ctx, n.Key)
	if err != nil {
		return step, fmt.Errorf("v3 get %s: %w", n.Key, err)
	}
	if len(have.Kvs) > 0 {
		if string(have.Kvs[0].Value) == n.Value {
			step.Action = MigrateSame
		} else {
			step.Action, step.Note = MigrateConflict, fmt.Sprintf("v3 holds %s", have.Kvs[0].Value)
		}
		return step, nil
	}
	step.Action = MigrateCopied
	if dryRun {
		return step, nil
	}
	var put []clientv3.OpOption
	var grant *clientv3.LeaseGrantResponse
	if n.TTL > 0 {
		if grant, err = cli.Grant(ctx, n.TTL); err != nil {
			return step, fmt.Errorf("v3 lease for %s: %w", n.Key, err)
		}
		put = append(put, clientv3.WithLease(grant.ID))
	}
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(n.Key), "=", 0)).
		Then(clientv3.OpPut(n.Key, n.Value, put...)).
		Commit()
	if err == nil && !resp.Succeeded {
		step.Action, step.Note = MigrateConflict, "created on v3 meanwhile"
	}
	if (err != nil || !resp.Succeeded) && grant != nil {
		_, _ = cli.Revoke(context.WithoutCancel(ctx), grant.ID)
	}
	if err != nil {
		return step, fmt.Errorf("v3 put %s: %w", n.Key, err)
	}
	return step, nil
}
