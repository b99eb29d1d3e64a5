package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/internal/etcdtest"
	"github.com/weftnet/weft/lease"
)

// TestRunRefusesIPv6OnUDP: the udp backend needs an IPv4 Network (it carries IPv6
// beside it), so an IPv6-only network on it stops weftd at start with
// ErrIPv6NotSupported, an error naming the backend, and no subnet.env.
func TestRunRefusesIPv6OnUDP(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real etcd server")
	}
	srv := etcdtest.Start(t)
	for name, cfg := range map[string]string{
		"IPv6-only":         `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"UDP"}}`,
		"IPv6-only-no-type": `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:db8::/48"}`,
	} {
		t.Run(name, func(t *testing.T) {
			prefix := "/weft-test/ipv6-" + name
			putConfig(t, srv, "v3", prefix, cfg)
			dir := t.TempDir()
			opts, err := parseFlags([]string{
				"--etcd-endpoints=" + srv.Endpoint(), "--etcd-prefix=" + prefix,
				"--iface-regex=.", "--public-ip=192.0.2.10",
				"--subnet-file=" + filepath.Join(dir, "subnet.env"),
				"--lease-state-file=" + filepath.Join(dir, "lease.json"),
				"--iptables-forward-rules=false",
			}, func(string) string { return "" }, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			d := &daemon{opts: opts, log: zaptest.NewLogger(t)}
			if err := d.run(ctx); !errors.Is(err, lease.ErrIPv6NotSupported) || !strings.Contains(err.Error(), "udp backend") {
				t.Fatalf("run = %v, want ErrIPv6NotSupported naming the udp backend", err)
			}
			if _, err := os.Stat(opts.subnetFile); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("subnet.env after the refusal: %v", err)
			}
		})
	}
}
