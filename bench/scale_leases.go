package bench

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/lease"
)

// scaleSubnetLen is the longest-prefix SubnetLen needed for n simulated hosts plus
// the measured daemons in the lab's overlay /16 (at least /24, at most /30).
func scaleSubnetLen(n int) int {
	for l := 24; l < 30; l++ {
		if 1<<(l-16)-1 >= n+n/8+8 {
			return l
		}
	}
	return 30
}

// overlayCfg is the network config's Network and SubnetLen. (lease.ParseConfig is not
// used: the benchmark must be able to ask a daemon for a SubnetLen weft's own parser
// may refuse.)
type overlayCfg struct {
	network netip.Prefix
	bits    int
}

func (c overlayCfg) count() int { return 1 << (c.bits - c.network.Bits()) }

// subnet is the i-th subnet of the network.
func (c overlayCfg) subnet(i int) netip.Prefix {
	a := c.network.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(i) << (32 - c.bits)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), c.bits)
}

// simPublicIP is the PublicIP of simulated host i: 192.0.2.100-254, repeating. Nothing
// is ever sent to them (the lab's LAN1, on-link for host-gw); a real host has .10+.
func simPublicIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{192, 0, 2, byte(100 + i%155)}) }

// simSite is the site of the simulated hosts in a run with sites: not the measured
// host's (simHome), so it chooses each one's way.
const simSite, simHome = "far", "near"

// simValue is simulated host i's lease value on backend bt: a wireguard host has a
// public key of its own (no one holds its private key) and, with sites, a site of
// its own.
func simValue(bt string, sites bool, i int) string {
	a := lease.Attrs{PublicIP: simPublicIP(i), BackendType: bt}
	switch bt {
	case "vxlan":
		a.BackendData = json.RawMessage(fmt.Sprintf(`{"VNI":1,"VtepMAC":"02:5e:%02x:%02x:%02x:%02x"}`,
			byte(i>>24), byte(i>>16), byte(i>>8), byte(i)))
	case "wireguard":
		k := sha256.Sum256([]byte("weft-bench sim " + strconv.Itoa(i)))
		a.BackendData = json.RawMessage(fmt.Sprintf(`{"PublicKey":%q}`, base64.StdEncoding.EncodeToString(k[:])))
		if sites {
			a.Site = simSite
		}
	}
	v, _ := lease.EncodeAttrs(a)
	return string(v)
}

func (r *scaleRun) key(p netip.Prefix) string { return r.prefix + "/subnets/" + lease.SubnetKey(p) }

// addSim gives a new simulated host the lease of p, in etcd too.
func (r *scaleRun) addSim(ctx context.Context, p netip.Prefix) error {
	r.nextID++
	r.sim[p] = r.nextID
	_, err := r.cli.Put(ctx, r.key(p), simValue(r.o.Backend, r.o.Sites, r.nextID), clientv3.WithLease(r.grant))
	return err
}

// dropSim deletes the simulated host of p and its lease.
func (r *scaleRun) dropSim(ctx context.Context, p netip.Prefix) error {
	delete(r.sim, p)
	_, err := r.cli.Delete(ctx, r.key(p))
	return err
}

// compact compacts etcd (physically) at its current revision and returns it.
func (r *scaleRun) compact(ctx context.Context) (int64, error) {
	g, err := r.cli.Get(ctx, "compact-probe")
	if err != nil {
		return 0, fmt.Errorf("scale: etcd revision: %w", err)
	}
	if _, err := r.cli.Compact(ctx, g.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		return 0, fmt.Errorf("scale: compact: %w", err)
	}
	return g.Header.Revision, nil
}

// populate makes the simulated leases exactly the first n subnets after the first
// (and nothing else: leases of daemons measured before are dropped).
func (r *scaleRun) populate(ctx context.Context, n int) error {
	dir := r.prefix + "/subnets/"
	if _, err := r.cli.Delete(ctx, dir, clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("scale: clear leases: %w", err)
	}
	clear(r.sim)
	var ops []clientv3.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := r.cli.Txn(ctx).Then(ops...).Commit()
		ops = ops[:0]
		if err != nil {
			return fmt.Errorf("scale: write leases: %w", err)
		}
		return nil
	}
	for i := 1; i <= n; i++ {
		p := r.cfg.subnet(i)
		r.nextID++
		r.sim[p] = r.nextID
		ops = append(ops, clientv3.OpPut(r.key(p), simValue(r.o.Backend, r.o.Sites, r.nextID), clientv3.WithLease(r.grant)))
		if len(ops) == 100 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// dropOthers deletes every lease that is not a simulated host's (a daemon measured
// before left its own).
func (r *scaleRun) dropOthers(ctx context.Context) error {
	resp, err := r.cli.Get(ctx, r.prefix+"/subnets/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("scale: list leases: %w", err)
	}
	for _, kv := range resp.Kvs {
		p, err := lease.ParseSubnetKey(string(kv.Key))
		if err != nil {
			continue
		}
		if _, ok := r.sim[p]; !ok {
			if _, err := r.cli.Delete(ctx, string(kv.Key)); err != nil {
				return fmt.Errorf("scale: drop lease %s: %w", kv.Key, err)
			}
		}
	}
	return nil
}

// etcdSubnets is every lease's subnet in etcd but own.
func (r *scaleRun) etcdSubnets(ctx context.Context, own netip.Prefix) (map[netip.Prefix]bool, error) {
	resp, err := r.cli.Get(ctx, r.prefix+"/subnets/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("scale: list leases: %w", err)
	}
	out := map[netip.Prefix]bool{}
	for _, kv := range resp.Kvs {
		if p, err := lease.ParseSubnetKey(string(kv.Key)); err == nil && p != own {
			out[p] = true
		}
	}
	return out, nil
}

// freeAndLeased returns the subnets no lease holds (nor own) and the simulated
// hosts' subnets.
func (r *scaleRun) freeAndLeased(ctx context.Context, own netip.Prefix) (free, sim []netip.Prefix) {
	taken := map[netip.Prefix]bool{own: true}
	for p := range r.sim {
		taken[p] = true
	}
	if cur, err := r.etcdSubnets(ctx, own); err == nil {
		for p := range cur {
			taken[p] = true
		}
	}
	for i := 1; i < r.cfg.count(); i++ {
		if p := r.cfg.subnet(i); !taken[p] {
			free = append(free, p)
		}
	}
	sim = make([]netip.Prefix, 0, len(r.sim))
	for p := range r.sim {
		sim = append(sim, p)
	}
	return free, sim
}

func diff(have, want map[netip.Prefix]bool) (stale, missing int) {
	for p := range have {
		if !want[p] {
			stale++
		}
	}
	for p := range want {
		if !have[p] {
			missing++
		}
	}
	return stale, missing
}
