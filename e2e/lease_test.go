package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/lease"
)

// storedLease is a subnet key as etcd holds it, with its remaining TTL.
type storedLease struct {
	attrs lease.Attrs
	ttl   time.Duration
}

// leases reads every subnet key under the prefix, with the API the cluster uses.
func (c *cluster) leases() map[netip.Prefix]storedLease {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[netip.Prefix]storedLease{}
	if c.api == "v2" {
		hc := &http.Client{Transport: &http.Transport{DialContext: c.router.DialContext}}
		req, _ := http.NewRequestWithContext(ctx, "GET", c.etcd.Endpoint()+"/v2/keys"+prefix+"/subnets?recursive=true", nil)
		resp, err := hc.Do(req)
		if err != nil {
			c.t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var r struct {
			Node struct {
				Nodes []struct {
					Key, Value string
					TTL        int64 `json:"ttl"`
				} `json:"nodes"`
			} `json:"node"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			c.t.Fatalf("v2 listing %s: %v", body, err)
		}
		for _, n := range r.Node.Nodes {
			out[c.mustLease(n.Key, []byte(n.Value))] = storedLease{attrs: c.mustAttrs(n.Value), ttl: time.Duration(n.TTL) * time.Second}
		}
		return out
	}
	cli := c.etcdClient()
	resp, err := cli.Get(ctx, prefix+"/subnets/", clientv3.WithPrefix())
	if err != nil {
		c.t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			c.t.Fatal(err)
		}
		out[c.mustLease(string(kv.Key), kv.Value)] = storedLease{attrs: c.mustAttrs(string(kv.Value)), ttl: time.Duration(ttl.TTL) * time.Second}
	}
	return out
}

// checkLeases checks that etcd holds exactly the leases of subnets, each in flannel's
// key layout with its host's PublicIP, the BackendType backendType gives for the host
// and a TTL of about 24 h, and returns them.
func (c *cluster) checkLeases(subnets map[netip.Prefix]*host, backendType func(*host) string) []storedLease {
	c.t.Helper()
	stored := c.leases()
	if len(stored) != len(subnets) {
		c.t.Fatalf("etcd holds %d leases, want %d: %v", len(stored), len(subnets), stored)
	}
	var out []storedLease
	for s, h := range subnets {
		l, ok := stored[s]
		if !ok {
			c.t.Fatalf("no key %s/subnets/%s for %s", prefix, lease.SubnetKey(s), h.name)
		}
		if want := backendType(h); l.attrs.PublicIP.String() != h.ip || l.attrs.BackendType != want {
			c.t.Fatalf("%s: lease attrs %+v, want PublicIP %s and BackendType %q", h.name, l.attrs, h.ip, want)
		}
		if l.ttl < 23*time.Hour || l.ttl > 24*time.Hour {
			c.t.Fatalf("%s: TTL %v, want about 24h", h.name, l.ttl)
		}
		out = append(out, l)
	}
	return out
}

func (c *cluster) mustLease(key string, _ []byte) netip.Prefix {
	c.t.Helper()
	p, err := lease.ParseSubnetKey(key)
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

func (c *cluster) mustAttrs(v string) lease.Attrs {
	c.t.Helper()
	a, err := lease.DecodeAttrs([]byte(v))
	if err != nil {
		c.t.Fatal(err)
	}
	return a
}

func (c *cluster) deleteLease(p netip.Prefix) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.lab.Delete(ctx, prefix+"/subnets/"+lease.SubnetKey(p)); err != nil {
		c.t.Fatal(err)
	}
}

// TestLeasesAcrossHosts: weftd hosts sharing one etcd get distinct subnets in
// flannel's key layout with a 24 h TTL, keep them across restarts, and get them back
// after the lease expired and subnet.env was wiped.
func TestLeasesAcrossHosts(t *testing.T) {
	for _, api := range []string{"v3", "v2"} {
		t.Run(api, func(t *testing.T) {
			c := newCluster(t, api)
			c.putConfig(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":"alloc"}}`)
			hosts := []*host{c.addHost("a", "lan1"), c.addHost("b", "lan1"), c.addHost("c", "lan2")}
			subnets := map[netip.Prefix]*host{}
			for _, h := range hosts {
				c.start(h)
			}
			for _, h := range hosts {
				env := c.waitSubnetEnv(h)
				if other, dup := subnets[env.Subnet]; dup {
					t.Fatalf("%s and %s both got %v", h.name, other.name, env.Subnet)
				}
				subnets[env.Subnet] = h
				if env.Network.String() != "198.18.0.0/16" || env.Subnet.Bits() != 24 {
					t.Fatalf("%s: subnet.env %+v", h.name, env)
				}
			}
			for _, l := range c.checkLeases(subnets, func(*host) string { return "alloc" }) {
				if l.attrs.HostID == "" {
					t.Fatalf("lease without WeftHostID: %+v", l.attrs)
				}
			}

			a := hosts[0]
			before := c.waitSubnetEnv(a).Subnet
			c.stop(a)
			c.start(a)
			eventually(t, 20*time.Second, func() error { return healthy(a) })
			if got := c.waitSubnetEnv(a).Subnet; got != before {
				t.Fatalf("restart: subnet %v, want %v", got, before)
			}

			// Down past the TTL with /run wiped: the key is gone, so is subnet.env.
			c.stop(a)
			c.deleteLease(before)
			if err := os.Remove(a.subnetFile()); err != nil {
				t.Fatal(err)
			}
			c.start(a)
			if got := c.waitSubnetEnv(a).Subnet; got != before {
				t.Fatalf("after expiry: subnet %v, want the old %v", got, before)
			}
		})
	}
}

// healthy asks weftd's readiness endpoint on h.
func healthy(h *host) error {
	hc := &http.Client{Transport: &http.Transport{DialContext: h.ns.DialContext}, Timeout: 2 * time.Second}
	resp, err := hc.Get("http://127.0.0.1:8475/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return &statusError{resp.Status}
	}
	return nil
}

type statusError struct{ s string }

func (e *statusError) Error() string { return "readyz: " + e.s }
