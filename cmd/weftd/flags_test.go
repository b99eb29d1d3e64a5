package main

import (
	"io"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	env := func(m map[string]string) func(string) string {
		return func(k string) string { return m[k] }
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(*options) bool
		wantErr string
	}{
		{name: "flanneld defaults", check: func(o *options) bool {
			return o.etcdPrefix == "/coreos.com/network" && o.subnetFile == "/run/flannel/subnet.env" &&
				o.renewMargin == 60 && o.etcdAPI == "v3" && o.healthzPort == 0 &&
				o.etcdEndpoints == "http://127.0.0.1:4001,http://127.0.0.1:2379" &&
				o.leaseStateFile == "/var/lib/weft/lease.json" && o.iptablesForwardRules
		}},
		{name: "repeatable iface", args: []string{"--iface=eth0", "--iface", "192.0.2.10"},
			check: func(o *options) bool { return strings.Join(o.ifaces, "|") == "eth0|192.0.2.10" }},
		// flanneld takes each value whole: a regex may hold commas.
		{name: "iface-regex with a comma", args: []string{"--iface-regex=^eth[0-9]{1,2}$", "--iface-regex", "^192\\.0\\.2\\."},
			check: func(o *options) bool { return strings.Join(o.ifaceRegex, "|") == `^eth[0-9]{1,2}$|^192\.0\.2\.` }},
		{name: "iface with a comma is one name", args: []string{"--iface=eth0,eth1"},
			check: func(o *options) bool { return len(o.ifaces) == 1 && o.ifaces[0] == "eth0,eth1" }},
		{name: "iface-regex from env keeps commas", env: map[string]string{"FLANNELD_IFACE_REGEX": "^e[a-z]{2,3}0$"},
			check: func(o *options) bool { return len(o.ifaceRegex) == 1 && o.ifaceRegex[0] == "^e[a-z]{2,3}0$" }},
		{name: "iface-can-reach", args: []string{"--iface-can-reach=192.0.2.1"},
			check: func(o *options) bool { return o.canReach == "192.0.2.1" }},
		{name: "env fills a flag", env: map[string]string{"FLANNELD_ETCD_PREFIX": "/x", "FLANNELD_SUBNET_LEASE_RENEW_MARGIN": "30"},
			check: func(o *options) bool { return o.etcdPrefix == "/x" && o.renewMargin == 30 }},
		{name: "command line beats env", args: []string{"--etcd-prefix=/cli"}, env: map[string]string{"FLANNELD_ETCD_PREFIX": "/env"},
			check: func(o *options) bool { return o.etcdPrefix == "/cli" }},
		{name: "env with a bad value", env: map[string]string{"FLANNELD_HEALTHZ_PORT": "x"}, wantErr: "FLANNELD_HEALTHZ_PORT"},
		{name: "etcd api v2", args: []string{"--etcd-api=v2"}, check: func(o *options) bool { return o.etcdAPI == "v2" }},
		{name: "bad etcd api", args: []string{"--etcd-api=v4"}, wantErr: "--etcd-api"},
		{name: "iptables-mode auto by default", check: func(o *options) bool { return o.iptablesMode == "auto" }},
		{name: "iptables-mode legacy from env", env: map[string]string{"FLANNELD_IPTABLES_MODE": "legacy"},
			check: func(o *options) bool { return o.iptablesMode == "legacy" }},
		{name: "bad iptables-mode", args: []string{"--iptables-mode=xtables"}, wantErr: "--iptables-mode"},
		{name: "ip-masq", args: []string{"--ip-masq"}, check: func(o *options) bool { return o.ipMasq && !o.ipMasqNotRandom }},
		{name: "ip-masq without random-fully", args: []string{"--ip-masq", "--ip-masq-fully-random-disable"},
			check: func(o *options) bool { return o.ipMasq && o.ipMasqNotRandom }},
		{name: "ip-masq from env", env: map[string]string{"FLANNELD_IP_MASQ": "true"}, check: func(o *options) bool { return o.ipMasq }},
		{name: "public-ipv6 not IPv6", args: []string{"--public-ipv6=192.0.2.1"}, wantErr: "--public-ipv6"},
		{name: "renew margin too large", args: []string{"--subnet-lease-renew-margin=1440"}, wantErr: "renew-margin"},
		{name: "kube needs node name", args: []string{"--kube-subnet-mgr"}, wantErr: "NODE_NAME"},
		{name: "kube node from env", args: []string{"--kube-subnet-mgr"}, env: map[string]string{"NODE_NAME": "n1"},
			check: func(o *options) bool { return o.nodeName == "n1" }},
		// flanneld's flags that weftd used to refuse or ignore.
		{name: "ip-blackhole-route", args: []string{"--ip-blackhole-route"}, check: func(o *options) bool { return o.blackholeRoute }},
		{name: "ip-blackhole-route off by default", check: func(o *options) bool { return !o.blackholeRoute }},
		{name: "ip-blackhole-route from env", env: map[string]string{"FLANNELD_IP_BLACKHOLE_ROUTE": "true"},
			check: func(o *options) bool { return o.blackholeRoute }},
		{name: "v", args: []string{"-v=4"}, check: func(o *options) bool { return o.verbosity == 4 }},
		{name: "v from env", env: map[string]string{"FLANNELD_V": "2"}, check: func(o *options) bool { return o.verbosity == 2 }},
		{name: "v beyond klog's int32", args: []string{"-v=4294967296"}, wantErr: "-v"},
		{name: "vmodule", args: []string{"--vmodule=kube*=4,main=2,"}, check: func(o *options) bool { return o.vmodule == "kube*=4,main=2," }},
		{name: "vmodule from env", env: map[string]string{"FLANNELD_VMODULE": "iptables=6"},
			check: func(o *options) bool { return o.vmodule == "iptables=6" }},
		{name: "vmodule without level", args: []string{"--vmodule=kube"}, wantErr: "filename=N"},
		{name: "vmodule bad level", args: []string{"--vmodule=kube=x"}, wantErr: "filename=N"},
		{name: "vmodule negative level", args: []string{"--vmodule=kube=-1"}, wantErr: "negative"},
		{name: "log_backtrace_at", args: []string{"--log_backtrace_at=main.go:229"},
			check: func(o *options) bool { return o.logBacktraceAt == "main.go:229" }},
		{name: "log_backtrace_at from env", env: map[string]string{"FLANNELD_LOG_BACKTRACE_AT": "kube.go:12"},
			check: func(o *options) bool { return o.logBacktraceAt == "kube.go:12" }},
		{name: "log_backtrace_at no line", args: []string{"--log_backtrace_at=main.go"}, wantErr: "file.go:234"},
		{name: "log_backtrace_at no dot", args: []string{"--log_backtrace_at=main:3"}, wantErr: "file.go:234"},
		{name: "log_backtrace_at line 0", args: []string{"--log_backtrace_at=main.go:0"}, wantErr: "zero"},
		// flanneld acts on --version before it reads FLANNELD_*.
		{name: "FLANNELD_VERSION changes nothing", env: map[string]string{"FLANNELD_VERSION": "true"},
			check: func(o *options) bool { return !o.version }},
		// EVENT_QUEUE_DEPTH and CONT_WHEN_CACHE_NOT_READY, read as flanneld reads them.
		{name: "event queue depth default", args: []string{"--kube-subnet-mgr"}, env: map[string]string{"NODE_NAME": "n1"},
			check: func(o *options) bool { return o.eventQueueDepth == 5000 }},
		{name: "event queue depth", args: []string{"--kube-subnet-mgr"}, env: map[string]string{"NODE_NAME": "n1", "EVENT_QUEUE_DEPTH": "200"},
			check: func(o *options) bool { return o.eventQueueDepth == 200 }},
		{name: "event queue depth not positive", args: []string{"--kube-subnet-mgr"}, env: map[string]string{"NODE_NAME": "n1", "EVENT_QUEUE_DEPTH": "-3"},
			check: func(o *options) bool { return o.eventQueueDepth == 5000 }},
		{name: "event queue depth not a number", args: []string{"--kube-subnet-mgr"}, env: map[string]string{"NODE_NAME": "n1", "EVENT_QUEUE_DEPTH": "5k"},
			wantErr: "EVENT_QUEUE_DEPTH"},
		{name: "event queue depth unread without kube", env: map[string]string{"EVENT_QUEUE_DEPTH": "5k"},
			check: func(o *options) bool { return o.eventQueueDepth == 5000 }},
		{name: "cont when cache not ready", env: map[string]string{"CONT_WHEN_CACHE_NOT_READY": "true"},
			check: func(o *options) bool { return o.contWhenCacheNotReady }},
		{name: "cont when cache not ready only for true", env: map[string]string{"CONT_WHEN_CACHE_NOT_READY": "1"},
			check: func(o *options) bool { return !o.contWhenCacheNotReady }},
		{name: "kube node from our pod", args: []string{"--kube-subnet-mgr"},
			env: map[string]string{"POD_NAME": "kube-flannel-ds-x", "POD_NAMESPACE": "kube-flannel"},
			check: func(o *options) bool {
				return o.nodeName == "" && o.podName == "kube-flannel-ds-x" && o.podNamespace == "kube-flannel"
			}},
		{name: "kube pod name without namespace", args: []string{"--kube-subnet-mgr"}, env: map[string]string{"POD_NAME": "p"}, wantErr: "POD_NAMESPACE"},
		{name: "kube node name beats pod", args: []string{"--kube-subnet-mgr", "--node-name=n2"},
			env:   map[string]string{"NODE_NAME": "n1", "POD_NAME": "p", "POD_NAMESPACE": "kube-flannel"},
			check: func(o *options) bool { return o.nodeName == "n2" }},
		{name: "unknown flag", args: []string{"--no-such-flag"}, wantErr: "no-such-flag"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "extra"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(tt.args, env(tt.env), io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !tt.check(o) {
				t.Fatalf("options not as expected: %+v", o)
			}
		})
	}
}

// TestPublicIPv6Flag: --public-ipv6 (or FLANNELD_PUBLIC_IPV6) takes an IPv6 address
// and nothing else.
func TestPublicIPv6Flag(t *testing.T) {
	o, err := parseFlags([]string{"--public-ipv6=2001:db8::1"}, func(string) string { return "" }, io.Discard)
	if err != nil || o.publicIPv6 != "2001:db8::1" {
		t.Fatalf("--public-ipv6=2001:db8::1: %+v, %v", o, err)
	}
	env := func(k string) string {
		if k == "FLANNELD_PUBLIC_IPV6" {
			return "2001:db8::2"
		}
		return ""
	}
	if o, err = parseFlags(nil, env, io.Discard); err != nil || o.publicIPv6 != "2001:db8::2" {
		t.Fatalf("FLANNELD_PUBLIC_IPV6: %+v, %v", o, err)
	}
	for _, bad := range []string{"192.0.2.1", "::ffff:192.0.2.1", "fe80::1%eth0", "x"} {
		if _, err := parseFlags([]string{"--public-ipv6=" + bad}, func(string) string { return "" }, io.Discard); err == nil ||
			!strings.Contains(err.Error(), "--public-ipv6") {
			t.Errorf("--public-ipv6=%s: error %v, want one naming the flag", bad, err)
		}
	}
}
