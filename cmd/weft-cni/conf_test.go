package main

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

const env4 = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"

// TestDelegateConf: the delegate config built from subnet.env and network config
// variants, compared as JSON (what the delegate reads).
func TestDelegateConf(t *testing.T) {
	for _, tc := range []struct {
		name, env, conf, want string
	}{
		{
			name: "kube-flannel's plugin entry",
			env:  env4,
			conf: `{"cniVersion":"1.0.0","name":"cbr0","type":"flannel","delegate":{"hairpinMode":true,"isDefaultGateway":true}}`,
			want: `{"cniVersion":"1.0.0","name":"cbr0","type":"bridge","hairpinMode":true,"isDefaultGateway":true,
				"isGateway":true,"ipMasq":false,"mtu":1450,
				"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.3.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}]}}`,
		},
		{
			name: "daemon does not masquerade: the bridge does",
			env:  strings.Replace(env4, "IPMASQ=true", "IPMASQ=false", 1),
			conf: `{"cniVersion":"0.3.1","name":"n","type":"flannel"}`,
			want: `{"cniVersion":"0.3.1","name":"n","type":"bridge","isGateway":true,"ipMasq":true,"mtu":1450,
				"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.3.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}]}}`,
		},
		{
			name: "delegate settings win",
			env:  env4,
			conf: `{"cniVersion":"0.4.0","name":"n","type":"flannel","delegate":{"ipMasq":true,"mtu":1400,"isGateway":false,"bridge":"br9"}}`,
			want: `{"cniVersion":"0.4.0","name":"n","type":"bridge","isGateway":false,"ipMasq":true,"mtu":1400,"bridge":"br9",
				"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.3.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}]}}`,
		},
		{
			name: "other delegate type: no isGateway",
			env:  env4,
			conf: `{"name":"n","type":"flannel","delegate":{"type":"ipvlan","master":"eth0"}}`,
			want: `{"name":"n","type":"ipvlan","master":"eth0","ipMasq":false,"mtu":1450,
				"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.3.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}]}}`,
		},
		{
			name: "top-level ipam: its type and routes kept, ranges replaced",
			env:  env4,
			conf: `{"cniVersion":"1.0.0","name":"n","type":"flannel","ipam":{"type":"static-ish","dataDir":"/x","ranges":[[{"subnet":"1.2.3.0/24"}]],"routes":[{"dst":"192.0.2.0/24"}]}}`,
			want: `{"cniVersion":"1.0.0","name":"n","type":"bridge","isGateway":true,"ipMasq":false,"mtu":1450,
				"ipam":{"type":"static-ish","dataDir":"/x","ranges":[[{"subnet":"10.244.3.0/24"}]],"routes":[{"dst":"192.0.2.0/24"},{"dst":"10.244.0.0/16"}]}}`,
		},
		{
			name: "runtimeConfig handed to the delegate",
			env:  env4,
			conf: `{"cniVersion":"1.0.0","name":"n","type":"flannel","runtimeConfig":{"portMappings":[]}}`,
			want: `{"cniVersion":"1.0.0","name":"n","type":"bridge","isGateway":true,"ipMasq":false,"mtu":1450,"runtimeConfig":{"portMappings":[]},
				"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.3.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}]}}`,
		},
		{
			name: "dual stack",
			env:  env4 + "FLANNEL_IPV6_NETWORK=fd00:10::/56\nFLANNEL_IPV6_SUBNET=fd00:10:0:3::1/64\n",
			conf: `{"cniVersion":"1.0.0","name":"n","type":"flannel"}`,
			want: `{"cniVersion":"1.0.0","name":"n","type":"bridge","isGateway":true,"ipMasq":false,"mtu":1450,
				"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.3.0/24"}],[{"subnet":"fd00:10:0:3::/64"}]],
				"routes":[{"dst":"10.244.0.0/16"},{"dst":"fd00:10::/56"}]}}`,
		},
		{
			name: "IPv6 only, comments and unknown keys skipped",
			env:  "# written by weftd\n\nFLANNEL_IPV6_NETWORK=fd00:10::/56\nFLANNEL_IPV6_SUBNET=fd00:10:0:3::1/64\nFLANNEL_MTU=1280\nFLANNEL_IPMASQ=false\nFLANNEL_FUTURE=1\n",
			conf: `{"cniVersion":"1.0.0","name":"n","type":"flannel"}`,
			want: `{"cniVersion":"1.0.0","name":"n","type":"bridge","isGateway":true,"ipMasq":true,"mtu":1280,
				"ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:10:0:3::/64"}]],"routes":[{"dst":"fd00:10::/56"}]}}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := parseNetConf([]byte(tc.conf))
			if err != nil {
				t.Fatal(err)
			}
			e, err := parseSubnetEnv([]byte(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			d, err := delegateConf(n, e)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(d)
			var gotV, wantV any
			if err := json.Unmarshal(got, &gotV); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.want), &wantV); err != nil {
				t.Fatalf("want: %v", err)
			}
			if !reflect.DeepEqual(gotV, wantV) {
				t.Errorf("delegate config\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestNetConfDefaults(t *testing.T) {
	n, err := parseNetConf([]byte(`{"cniVersion":"1.0.0","name":"cbr0","type":"flannel"}`))
	if err != nil {
		t.Fatal(err)
	}
	if n.SubnetFile != "/run/flannel/subnet.env" || n.DataDir != "/var/lib/cni/flannel" {
		t.Errorf("defaults: subnetFile %q dataDir %q", n.SubnetFile, n.DataDir)
	}
	n, err = parseNetConf([]byte(`{"name":"x","subnetFile":"/tmp/s.env","dataDir":"/tmp/d"}`))
	if err != nil || n.SubnetFile != "/tmp/s.env" || n.DataDir != "/tmp/d" {
		t.Errorf("given paths: %+v %v", n, err)
	}
}

// TestBadInput: every bad input is an error wrapping the right sentinel and saying
// what is wrong.
func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, env, conf string
		is              error
		says            string
	}{
		{name: "conf not JSON", conf: `{"name":`, is: ErrNetConf, says: "unexpected end"},
		{name: "conf wrong type", conf: `{"delegate":[1]}`, is: ErrNetConf, says: "cannot unmarshal"},
		{name: "delegate type not a string", conf: `{"delegate":{"type":3}}`, is: ErrNetConf, says: "delegate.type"},
		{name: "delegate type empty", conf: `{"delegate":{"type":""}}`, is: ErrNetConf, says: "delegate.type"},
		{name: "delegate name", conf: `{"delegate":{"name":"x"}}`, is: ErrNetConf, says: `"name"`},
		{name: "delegate ipam", conf: `{"delegate":{"ipam":{}}}`, is: ErrNetConf, says: `"ipam"`},
		{name: "ipam type not a string", conf: `{"ipam":{"type":false}}`, is: ErrNetConf, says: "ipam.type"},
		{name: "ipam routes not a list", conf: `{"ipam":{"routes":"x"}}`, env: env4, is: ErrNetConf, says: "ipam.routes must be a list"},
		{name: "ipam route without dst", conf: `{"ipam":{"routes":[{"gw":"1.2.3.4"}]}}`, env: env4, is: ErrNetConf, says: "ipam.routes[0]"},
		{name: "ipam route bad dst", conf: `{"ipam":{"routes":[{"dst":"nope"}]}}`, env: env4, is: ErrNetConf, says: "ipam.routes[0].dst"},
		{name: "empty subnet.env", env: "", is: ErrSubnetEnv, says: "missing FLANNEL_NETWORK, FLANNEL_SUBNET, FLANNEL_MTU, FLANNEL_IPMASQ"},
		{name: "no subnet", env: "FLANNEL_NETWORK=10.0.0.0/16\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n", is: ErrSubnetEnv, says: "missing FLANNEL_SUBNET"},
		{name: "no network", env: "FLANNEL_SUBNET=10.0.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n", is: ErrSubnetEnv, says: "missing FLANNEL_NETWORK"},
		{name: "no MTU", env: "FLANNEL_NETWORK=10.0.0.0/16\nFLANNEL_SUBNET=10.0.1.1/24\nFLANNEL_IPMASQ=true\n", is: ErrSubnetEnv, says: "missing FLANNEL_MTU"},
		{name: "IPv6 half", env: env4 + "FLANNEL_IPV6_SUBNET=fd00::1/64\n", is: ErrSubnetEnv, says: "missing FLANNEL_IPV6_NETWORK"},
		{name: "bad network", env: strings.Replace(env4, "10.244.0.0/16", "10.244.0.0", 1), is: ErrSubnetEnv, says: "FLANNEL_NETWORK"},
		{name: "IPv6 as network", env: strings.Replace(env4, "10.244.0.0/16", "fd00::/16", 1), is: ErrSubnetEnv, says: "not an IPv4 prefix"},
		{name: "IPv4 as IPv6 subnet", env: env4 + "FLANNEL_IPV6_NETWORK=fd00::/16\nFLANNEL_IPV6_SUBNET=10.0.0.1/24\n", is: ErrSubnetEnv, says: "not an IPv6 prefix"},
		{name: "bad subnet", env: strings.Replace(env4, "10.244.3.1/24", "10.244.3.1/33", 1), is: ErrSubnetEnv, says: "FLANNEL_SUBNET"},
		{name: "subnet outside network", env: strings.Replace(env4, "10.244.3.1/24", "10.245.3.1/24", 1), is: ErrSubnetEnv, says: "not inside network"},
		{name: "subnet wider than network", env: strings.Replace(env4, "10.244.3.1/24", "10.244.3.1/8", 1), is: ErrSubnetEnv, says: "not inside network"},
		{name: "MTU not a number", env: strings.Replace(env4, "1450", "big", 1), is: ErrSubnetEnv, says: "FLANNEL_MTU"},
		{name: "MTU too small", env: strings.Replace(env4, "1450", "0", 1), is: ErrSubnetEnv, says: "out of range"},
		{name: "MTU too big", env: strings.Replace(env4, "1450", "70000", 1), is: ErrSubnetEnv, says: "out of range"},
		{name: "IPMASQ not a bool", env: strings.Replace(env4, "IPMASQ=true", "IPMASQ=yes", 1), is: ErrSubnetEnv, says: "FLANNEL_IPMASQ"},
		{name: "line without =", env: env4 + "FLANNEL_MTU\n", is: ErrSubnetEnv, says: "line 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := tc.conf
			if conf == "" {
				conf = `{"name":"n"}`
			}
			n, err := parseNetConf([]byte(conf))
			if err == nil {
				var e *subnetEnv
				e, err = parseSubnetEnv([]byte(tc.env))
				if err == nil {
					_, err = delegateConf(n, e)
				}
			}
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q, want one wrapping %v and saying %q", err, tc.is, tc.says)
			}
		})
	}
}

func TestSavedPath(t *testing.T) {
	for _, id := range []string{"", ".", "..", "a/b", "../x"} {
		if _, err := savedPath("/var/lib/cni/flannel", id); !errors.Is(err, ErrContainerID) {
			t.Errorf("container ID %q: %v, want ErrContainerID", id, err)
		}
	}
	if p, err := savedPath("/d", "abc-123"); err != nil || p != "/d/abc-123" {
		t.Errorf("savedPath: %q %v", p, err)
	}
}

// FuzzParse: no input to the parsers panics, and whatever they accept gives a
// delegate config that marshals, with one range per family and the subnet inside
// the routes' network.
func FuzzParse(f *testing.F) {
	f.Add([]byte(env4), []byte(`{"cniVersion":"1.0.0","name":"cbr0","type":"flannel","delegate":{"hairpinMode":true}}`))
	f.Add([]byte(env4+"FLANNEL_IPV6_NETWORK=fd00::/56\nFLANNEL_IPV6_SUBNET=fd00:0:0:1::1/64\n"), []byte(`{"ipam":{"routes":[{"dst":"0.0.0.0/0"}]}}`))
	f.Add([]byte("FLANNEL_MTU=\nFLANNEL_IPMASQ"), []byte(`{"delegate":{"type":1}}`))
	f.Fuzz(func(t *testing.T, env, conf []byte) {
		n, err := parseNetConf(conf)
		if err != nil {
			if !errors.Is(err, ErrNetConf) {
				t.Fatalf("netconf error %v does not wrap ErrNetConf", err)
			}
			return
		}
		e, err := parseSubnetEnv(env)
		if err != nil {
			if !errors.Is(err, ErrSubnetEnv) {
				t.Fatalf("subnet.env error %v does not wrap ErrSubnetEnv", err)
			}
			return
		}
		if e.MTU < 68 || e.MTU > 65535 || (!e.Subnet.IsValid() && !e.Subnet6.IsValid()) {
			t.Fatalf("accepted %+v", e)
		}
		d, err := delegateConf(n, e)
		if err != nil {
			if !errors.Is(err, ErrNetConf) {
				t.Fatalf("delegate error %v does not wrap ErrNetConf", err)
			}
			return
		}
		if _, err := json.Marshal(d); err != nil {
			t.Fatalf("delegate config does not marshal: %v", err)
		}
		ipam := d["ipam"].(map[string]any)
		want := 0
		if e.Subnet.IsValid() {
			want++
		}
		if e.Subnet6.IsValid() {
			want++
		}
		if got := len(ipam["ranges"].([][]map[string]any)); got != want {
			t.Fatalf("%d ranges, want %d", got, want)
		}
	})
}
