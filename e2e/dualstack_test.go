package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
)

// TestFamiliesWithFlanneld: a weftd host and an upstream flanneld v0.28.10 host share
// one etcd on a dual-stack network and on an IPv6-only one (host-gw, IPv6 underlay
// 2001:db8:1::/64 on LAN1). Both get distinct subnets of each family the network
// has, write subnet.env alike (the same lines in the same order, flanneld's format),
// write lease keys of one form (<v4>-<len>&<v6>-<len>, 0.0.0.0-0&<v6>-<len>) with
// values of the same fields, and each takes the other's lease: flanneld routes to
// weftd's subnets, weftd reports flanneld's lease with its IPv6 subnet and routes to
// both (flanneld's routes are checked on the dual-stack network only, see below).
func TestFamiliesWithFlanneld(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		v4     bool
	}{
		{"dual-stack", `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"host-gw"}}`, true},
		{"IPv6-only", `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"host-gw"}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.SkipShort(t, "a namespace lab with etcd and the upstream flanneld")
			flanneld := flanneldBin(t)
			c := newCluster(t, "v3")
			c.putConfig(tc.config)
			w, f := c.addHost("w", "lan1"), c.addHost("f", "lan1")
			v6addr := map[*host]string{w: "2001:db8:1::11", f: "2001:db8:1::12"}
			for h, a := range v6addr {
				c.sh(h.ns, "ip -6 addr add "+a+"/64 dev eth0 nodad")
			}
			// flanneld first: on an IPv6-only network in etcd mode it finds its lease
			// by PublicIP alone, 0.0.0.0 on every IPv6-only lease, so it would take
			// weftd's as its own (see docs/compatibility.md).
			c.run(f, lab.DaemonSpec{Binary: flanneld})
			envF := c.waitSubnetEnv(f)
			c.start(w)
			envW := c.waitSubnetEnv(w)

			// subnet.env: flanneld's lines, order and format.
			fileF, fileW := readFile(t, f.subnetFile()), readFile(t, w.subnetFile())
			if got, want := envKeys(fileW), envKeys(fileF); !slices.Equal(got, want) {
				t.Errorf("subnet.env lines: weftd %v, flanneld %v", got, want)
			}
			if again := renderEnv(t, envF); !bytes.Equal(again, fileF) {
				t.Errorf("weft's writer renders flanneld's subnet.env differently:\n%s\nflanneld:\n%s", again, fileF)
			}
			if envW.IPv6Network != envF.IPv6Network || envW.Network != envF.Network || envW.MTU != envF.MTU || envW.IPMasq != envF.IPMasq {
				t.Errorf("subnet.env: weftd %+v, flanneld %+v", envW, envF)
			}
			if !envW.IPv6Subnet.IsValid() || envW.IPv6Subnet == envF.IPv6Subnet || envW.Subnet.IsValid() != tc.v4 ||
				tc.v4 && envW.Subnet == envF.Subnet {
				t.Fatalf("subnets: weftd %v %v, flanneld %v %v", envW.Subnet, envW.IPv6Subnet, envF.Subnet, envF.IPv6Subnet)
			}

			// etcd: one key each, named by both subnets, values of the same fields.
			stored := rawLeases(t, c)
			if len(stored) != 2 {
				t.Fatalf("etcd holds %d leases, want 2: %v", len(stored), stored)
			}
			keyOf := func(env lease.SubnetEnv) string {
				return lease.Key{Subnet: env.Subnet, IPv6Subnet: env.IPv6Subnet}.String()
			}
			valF, okF := stored[keyOf(envF)]
			valW, okW := stored[keyOf(envW)]
			if !okF || !okW {
				t.Fatalf("keys %v; want flanneld's %s and weftd's %s", mapKeys(stored), keyOf(envF), keyOf(envW))
			}
			if !tc.v4 && !strings.HasPrefix(keyOf(envW), "0.0.0.0-0&") {
				t.Errorf("IPv6-only key %s", keyOf(envW))
			}
			fieldsF, fieldsW := jsonFields(t, valF), jsonFields(t, valW)
			delete(fieldsW, "WeftHostID") // weft's addition, ignored by flanneld (docs/compatibility.md)
			if !slices.Equal(mapKeys(fieldsW), mapKeys(fieldsF)) {
				t.Errorf("lease fields: weftd %s, flanneld %s", valW, valF)
			}
			for field, want := range map[string]string{"PublicIPv6": `"` + v6addr[w] + `"`, "BackendType": `"host-gw"`} {
				if string(fieldsW[field]) != want {
					t.Errorf("weftd's lease %s = %s, want %s", field, fieldsW[field], want)
				}
			}
			if string(fieldsW["PublicIP"]) != string(fieldsF["PublicIP"]) && !tc.v4 {
				t.Errorf("IPv6-only PublicIP: weftd %s, flanneld %s", fieldsW["PublicIP"], fieldsF["PublicIP"])
			}

			// Each takes the other's lease. (flanneld v0.28.10 in etcd mode cannot take
			// any IPv6-only peer, its own kind included: it marks every etcd lease as
			// having an IPv4 subnet, so its host-gw backend calls its IPv4 route
			// function, unset on an IPv6-only network, for 0.0.0.0/0 and stops. So its
			// side is checked on the dual-stack network only.)
			testenv.Eventually(t, 30*time.Second, func() error {
				if tc.v4 {
					routes := c.sh(f.ns, "ip -6 route show")
					if want := envW.IPv6Subnet.String() + " via " + v6addr[w]; !strings.Contains(routes, want) {
						return fmt.Errorf("flanneld has no route %q:\n%s", want, routes)
					}
					routes = c.sh(f.ns, "ip route show")
					if want := envW.Subnet.String() + " via " + w.ip; !strings.Contains(routes, want) {
						return fmt.Errorf("flanneld has no route %q:\n%s", want, routes)
					}
					routes = c.sh(w.ns, "ip route show")
					if want := envF.Subnet.String() + " via " + f.ip; !strings.Contains(routes, want) {
						return fmt.Errorf("weftd has no route %q:\n%s", want, routes)
					}
				}
				routes := c.sh(w.ns, "ip -6 route show")
				if want := envF.IPv6Subnet.Masked().String() + " via " + v6addr[f]; !strings.Contains(routes, want) {
					return fmt.Errorf("weftd has no route %q:\n%s", want, routes)
				}
				if logs := w.logs(); !strings.Contains(logs, `"ipv6-subnet":"`+envF.IPv6Subnet.String()+`"`) {
					return fmt.Errorf("weftd did not report flanneld's lease with %v", envF.IPv6Subnet)
				}
				return nil
			})
		})
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// envKeys are the variable names of a subnet.env, in order.
func envKeys(b []byte) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, _, _ := strings.Cut(line, "=")
		out = append(out, k)
	}
	return out
}

// renderEnv is env as weft's writer writes it.
func renderEnv(t *testing.T, env lease.SubnetEnv) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "subnet.env")
	if err := lease.WriteSubnetEnv(p, env); err != nil {
		t.Fatal(err)
	}
	return readFile(t, p)
}

// rawLeases are the subnet keys (last element) and values under the prefix.
func rawLeases(t *testing.T, c *cluster) map[string][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.etcdClient().Get(ctx, prefix+"/subnets/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), prefix+"/subnets/")] = kv.Value
	}
	return out
}

func jsonFields(t *testing.T, v []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(v, &m); err != nil {
		t.Fatalf("lease value %s: %v", v, err)
	}
	return m
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestCleanupFamilies: `weftd cleanup --release-lease` after weftd was killed on a
// dual-stack and on an IPv6-only network removes the IPv6 overlay routes via peers
// (as host-gw and DirectRouting write them) and the flannel-v6.<VNI> device beside
// the IPv4 ones, deletes the lease by its whole key, and keeps routes outside the
// networks of subnet.env.
func TestCleanupFamilies(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		v4           bool
	}{
		{"dual-stack", `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"host-gw"}}`, true},
		{"IPv6-only", `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"host-gw"}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.SkipShort(t, "a namespace lab with etcd")
			c := newCluster(t, "v3")
			c.putConfig(tc.config)
			a := c.addHost("a", "lan1")
			c.sh(a.ns, "ip -6 addr add 2001:db8:1::11/64 dev eth0 nodad")
			c.start(a)
			env := c.waitSubnetEnv(a)
			key := lease.Key{Subnet: env.Subnet, IPv6Subnet: env.IPv6Subnet}.String()
			if _, ok := rawLeases(t, c)[key]; !ok {
				t.Fatalf("no lease %s in etcd", key)
			}
			if err := syscall.Kill(a.daemon.Pid(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, func() error {
				if exited, _ := a.daemon.Exited(); !exited {
					return fmt.Errorf("weftd still runs after SIGKILL")
				}
				return nil
			})
			// What the IPv6 backends leave: routes to peers' subnets, the v6 vxlan device.
			c.sh(a.ns, "ip -6 route add fd00:db8:0:77::/64 via 2001:db8:1::12 dev eth0 && "+
				"ip -6 route add 2001:db8:99::/64 via 2001:db8:1::1 dev eth0 && "+
				"ip link add flannel-v6.1 type vxlan id 1 local 2001:db8:1::11 dstport 8472 dev eth0")
			if tc.v4 {
				c.sh(a.ns, "ip route add 198.18.77.0/24 via 192.0.2.99 dev eth0")
			}
			out, err := a.ns.Run(context.Background(), c.bin, "cleanup", "--release-lease", "--subnet-file="+a.subnetFile(),
				"--etcd-endpoints="+lab.EtcdEndpoint, "--etcd-prefix="+prefix)
			if err != nil {
				t.Fatalf("weftd cleanup: %v\n%s", err, out)
			}
			routes6 := c.sh(a.ns, "ip -6 route show")
			if strings.Contains(routes6, "fd00:db8:0:77::/64") || !strings.Contains(routes6, "2001:db8:99::/64") {
				t.Errorf("IPv6 routes after cleanup (want the overlay route gone, 2001:db8:99::/64 kept):\n%s", routes6)
			}
			if routes := c.sh(a.ns, "ip route show"); strings.Contains(routes, "198.18.77.0/24") {
				t.Errorf("IPv4 overlay route left:\n%s", routes)
			}
			if links := c.sh(a.ns, "ip -o link show"); strings.Contains(links, "flannel-v6.1") {
				t.Errorf("flannel-v6.1 left:\n%s", links)
			}
			if _, ok := rawLeases(t, c)[key]; ok {
				t.Errorf("lease %s still in etcd after --release-lease", key)
			}
			if _, err := os.Stat(a.subnetFile()); !os.IsNotExist(err) {
				t.Errorf("subnet.env still there (%v)", err)
			}
		})
	}
}
