package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/bench/lab"
)

// putV2 writes key=value with a TTL through etcd's v2 API, as flanneld before v0.21
// wrote its leases.
func (c *cluster) putV2(key, value string, ttl time.Duration) {
	c.t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: c.router.DialContext}, Timeout: 10 * time.Second}
	form := url.Values{"value": {value}, "ttl": {fmt.Sprint(int(ttl.Seconds()))}, "prevExist": {"false"}}
	req, _ := http.NewRequest(http.MethodPut, c.etcd.Endpoint()+"/v2/keys"+key, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		c.t.Fatalf("v2 put %s: %s", key, resp.Status)
	}
}

// v3Keys reads every key under the prefix on the v3 API: value, mod revision, lease.
func (c *cluster) v3Keys() map[string]*v3Key {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli := c.etcdClient()
	resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix())
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]*v3Key{}
	for _, kv := range resp.Kvs {
		k := &v3Key{value: string(kv.Value), modRev: kv.ModRevision, lease: kv.Lease}
		if kv.Lease != 0 {
			ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
			if err != nil {
				c.t.Fatal(err)
			}
			k.ttl = time.Duration(ttl.TTL) * time.Second
		}
		out[string(kv.Key)] = k
	}
	return out
}

type v3Key struct {
	value  string
	modRev int64
	lease  int64
	ttl    time.Duration
}

// migrate runs weftd migrate-etcd inside h's namespace.
func (c *cluster) migrate(h *host, extra ...string) string {
	c.t.Helper()
	args := append([]string{"migrate-etcd", "--from-v2", "--etcd-endpoints=" + lab.EtcdEndpoint, "--etcd-prefix=" + prefix}, extra...)
	out, err := h.ns.Run(context.Background(), c.bin, args...)
	if err != nil {
		c.t.Fatalf("weftd %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	c.t.Logf("weftd %s:\n%s", strings.Join(args, " "), out)
	return out
}

// TestMigrateEtcdV2: a cluster on etcd's v2 API (two weftd hosts, and a lease written
// as flanneld before v0.21 wrote them for a third host) is migrated with weftd
// migrate-etcd --from-v2: the dry run writes nothing; the run copies the config and
// every lease byte for byte with the TTL it had left; a second run changes nothing.
// Restarted on v3 (weftd hosts without their subnet.env, the third host running the
// real flanneld, which speaks only v3), every host keeps its subnet, and its lease
// is reused: weftd logs "reusing our lease", flanneld "Found lease".
func TestMigrateEtcdV2(t *testing.T) {
	if testing.Short() {
		t.Skip("needs root, network namespaces and etcd")
	}
	fl := flanneldBin(t)
	c := newCluster(t, "v2")
	c.putConfig(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":"udp"}}`)
	// putConfig writes both keyspaces; a v2 cluster has nothing in v3.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.etcdClient().Delete(ctx, prefix+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	a, b, f := c.addHost("a", "lan1"), c.addHost("b", "lan1"), c.addHost("f", "lan1")
	c.start(a)
	c.start(b)
	envA, envB := c.waitSubnetEnv(a), c.waitSubnetEnv(b)
	// f's lease, as flanneld v0.20 wrote it on v2 (no BackendType for udp), with 23 h left.
	subnetF := netip.MustParsePrefix("198.18.77.0/24")
	if subnetF == envA.Subnet.Masked() || subnetF == envB.Subnet.Masked() {
		subnetF = netip.MustParsePrefix("198.18.78.0/24")
	}
	if subnetF == envA.Subnet.Masked() || subnetF == envB.Subnet.Masked() {
		subnetF = netip.MustParsePrefix("198.18.79.0/24")
	}
	keyF := prefix + "/subnets/" + strings.Replace(subnetF.String(), "/", "-", 1)
	c.putV2(keyF, fmt.Sprintf(`{"PublicIP":%q}`, f.ip), 23*time.Hour)

	v2 := c.leases() // the cluster's API is v2
	if len(v2) != 3 {
		t.Fatalf("v2 holds %d leases, want 3: %v", len(v2), v2)
	}
	if got := c.v3Keys(); len(got) != 0 {
		t.Fatalf("v3 holds %d keys before the migration", len(got))
	}

	// The dry run says what it would copy and writes nothing.
	out := c.migrate(a, "--dry-run")
	if !strings.Contains(out, "4 of 4 keys copied to v3 (dry run") {
		t.Errorf("dry run output:\n%s", out)
	}
	if got := c.v3Keys(); len(got) != 0 {
		t.Fatalf("the dry run wrote %d keys to v3", len(got))
	}

	out = c.migrate(a)
	if !strings.Contains(out, "4 of 4 keys copied to v3\n") {
		t.Errorf("migration output:\n%s", out)
	}
	after := c.v3Keys()
	if after[prefix+"/config"] == nil || after[prefix+"/config"].lease != 0 {
		t.Errorf("config on v3: %+v", after[prefix+"/config"])
	}
	c.api = "v3"
	v3 := c.leases()
	for s, l := range v2 {
		m, ok := v3[s]
		if !ok {
			t.Errorf("lease %v not on v3", s)
			continue
		}
		if m.attrs.PublicIP != l.attrs.PublicIP || m.attrs.BackendType != l.attrs.BackendType {
			t.Errorf("lease %v: v3 %+v, v2 %+v", s, m.attrs, l.attrs)
		}
		// The TTL it had left on v2, less the seconds the test took.
		if m.ttl > l.ttl || m.ttl < l.ttl-time.Minute {
			t.Errorf("lease %v: TTL %v on v3, %v on v2", s, m.ttl, l.ttl)
		}
	}
	// Byte for byte: the v3 values are the v2 ones.
	c.api = "v2"
	hcv2 := v2Values(t, c)
	for k, v := range hcv2 {
		if after[k] == nil || after[k].value != v {
			t.Errorf("%s: v3 %+v, v2 %q", k, after[k], v)
		}
	}

	// A second run changes nothing: same keys, same revisions, same leases.
	out = c.migrate(a)
	if !strings.Contains(out, "0 of 4 keys copied") {
		t.Errorf("second run output:\n%s", out)
	}
	again := c.v3Keys()
	if len(again) != len(after) {
		t.Fatalf("second run: %d keys, before %d", len(again), len(after))
	}
	for k, v := range after {
		if w := again[k]; w == nil || w.modRev != v.modRev || w.lease != v.lease || w.value != v.value {
			t.Errorf("second run changed %s: %+v -> %+v", k, v, w)
		}
	}

	// Restart on v3, the weftd hosts without subnet.env. (Their state file stays: it
	// holds the host identity their leases carry; a host without it would be taken for
	// a clone and refused.) Each must find its migrated lease by its PublicIP.
	c.api = "v3"
	for _, h := range []*host{a, b} {
		c.stop(h)
		if err := os.Remove(h.subnetFile()); err != nil {
			t.Fatal(err)
		}
		c.start(h)
	}
	c.run(f, lab.DaemonSpec{Binary: fl})
	for h, want := range map[*host]netip.Prefix{a: envA.Subnet.Masked(), b: envB.Subnet.Masked(), f: subnetF} {
		got := c.waitSubnetEnv(h)
		if got.Subnet.Masked() != want {
			t.Errorf("%s: subnet %v on v3, had %v on v2", h.name, got.Subnet, want)
		}
	}
	if n := len(c.leases()); n != 3 {
		t.Errorf("%d leases on v3 after the restart, want 3", n)
	}
	for _, h := range []*host{a, b} {
		if !strings.Contains(h.logs(), "reusing our lease") {
			t.Errorf("weftd on %s did not reuse its migrated lease:\n%s", h.name, h.logs())
		}
	}
	if !strings.Contains(f.logs(), "Found lease") {
		t.Errorf("flanneld on f did not reuse its migrated lease:\n%s", f.logs())
	}
}

// v2Values reads the raw values under the prefix on the v2 API.
func v2Values(t *testing.T, c *cluster) map[string]string {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: c.router.DialContext}, Timeout: 10 * time.Second}
	out := map[string]string{}
	for _, dir := range []string{prefix + "/config", prefix + "/subnets"} {
		resp, err := hc.Get(c.etcd.Endpoint() + "/v2/keys" + dir + "?recursive=true")
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Node struct {
				Key, Value string
				Nodes      []struct{ Key, Value string }
			}
		}
		err = jsonDecode(resp, &r)
		if err != nil {
			t.Fatal(err)
		}
		if r.Node.Value != "" {
			out[r.Node.Key] = r.Node.Value
		}
		for _, n := range r.Node.Nodes {
			out[n.Key] = n.Value
		}
	}
	return out
}

func jsonDecode(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
