package etcdproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
)

// ErrCluster is wrapped by errors about the members given to StartCluster.
var ErrCluster = errors.New("bad etcd cluster")

// StartCluster starts one etcd per element of members, as the members of one new
// cluster, and waits until every one serves clients. Each element says where its
// member runs, as for Start; members are named m0, m1, ... unless Name is set, and
// Cluster is filled in. Every member needs its Host and Port (peers listen on
// Port+1, plain http). The members start together, since none serves before a
// quorum runs. On error every member started is closed, and a member that fails
// to start ends the others' wait.
func StartCluster(ctx context.Context, members []Options) ([]*Server, error) {
	if len(members) == 0 {
		return nil, fmt.Errorf("%w: no members", ErrCluster)
	}
	opts := append([]Options(nil), members...)
	peers := make([]string, len(opts))
	for i := range opts {
		o := &opts[i]
		if o.Host == "" || o.Port == 0 {
			return nil, fmt.Errorf("%w: member %d needs Host and Port", ErrCluster, i)
		}
		if o.Name == "" {
			o.Name = "m" + strconv.Itoa(i)
		}
		peers[i] = o.Name + "=http://" + net.JoinHostPort(o.Host, strconv.Itoa(o.Port+1))
	}
	cluster := strings.Join(peers, ",")
	// A member that fails stops the wait of the others: they would wait for it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	servers := make([]*Server, len(opts))
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i := range opts {
		opts[i].Cluster = cluster
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			servers[i], errs[i] = Start(ctx, opts[i])
			if errs[i] != nil {
				errs[i] = fmt.Errorf("member %s: %w", opts[i].Name, errs[i])
				cancel()
			}
		}(i)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, s := range servers {
			if s != nil {
				s.Close()
			}
		}
		return nil, err
	}
	return servers, nil
}
