package extension

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/lease"
)

// TestExtensionHostGWExample runs the host-gw example of flannel's
// Documentation/extension.md in a namespace, through `ip`: unquoted, the route to a
// peer's subnet comes with its lease and goes with it; quoted as the page has it, the
// quotes reach `ip` (no shell), which refuses them, as flanneld v0.28.10's `ip` does,
// and no route is made.
func TestExtensionHostGWExample(t *testing.T) {
	ns := uplinkNS(t, "weft-ext")
	ctx := context.Background()
	peer := peerLease("198.18.9.0/24", "192.0.2.20", "extension", "")
	routes := func(t *testing.T) string {
		t.Helper()
		out, err := ns.Run(ctx, "ip", "route", "show", "root", "198.18.0.0/16")
		if err != nil {
			t.Fatalf("ip route: %v: %s", err, out)
		}
		return strings.TrimSpace(out)
	}
	for _, c := range []struct {
		name, add, del string
		works          bool
	}{
		{"unquoted", `ip route add $SUBNET via $PUBLIC_IP`, `ip route del $SUBNET via $PUBLIC_IP`, true},
		{"quoted", `ip route add "$SUBNET" via "$PUBLIC_IP"`, `ip route del "$SUBNET" via "$PUBLIC_IP"`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := extensionConfig(t, map[string]string{"SubnetAddCommand": c.add, "SubnetRemoveCommand": c.del})
			be, err := New(cfg, extTestIface, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			err = ns.Do(func() error {
				be.HandleEvents(ctx, []lease.Event{{Type: lease.Added, Lease: peer}})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			if c.works {
				want = "198.18.9.0/24 via 192.0.2.20 dev eth0"
			}
			if got := routes(t); got != want {
				t.Fatalf("after the peer's lease: routes %q, want %q", got, want)
			}
			if err := ns.Do(func() error {
				be.HandleEvents(ctx, []lease.Event{{Type: lease.Removed, Lease: peer}})
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if got := routes(t); got != "" {
				t.Fatalf("after the peer's lease went: routes %q, want none", got)
			}
		})
	}
}

// uplinkNS makes a namespace whose eth0 (a netnstest.Uplink) has 192.0.2.10/24.
func uplinkNS(t testing.TB, name string) *netns.NS {
	t.Helper()
	ns := netnstest.New(t, name)
	netnstest.Uplink(t, ns, "eth0", "192.0.2.10/24")
	return ns
}
