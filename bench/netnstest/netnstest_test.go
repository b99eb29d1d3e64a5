package netnstest

import (
	"context"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/netns"
)

func TestVethPing(t *testing.T) {
	a, b := New(t, "wt-a"), New(t, "wt-b")
	if err := netns.Veth(a, "eth0", b, "eth0"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for ns, addr := range map[*netns.NS]string{a: "192.0.2.10/24", b: "192.0.2.11/24"} {
		if _, err := ns.Run(ctx, "ip", "addr", "add", addr, "dev", "eth0"); err != nil {
			t.Fatal(err)
		}
	}
	out, err := a.Run(ctx, "ping", "-c1", "-W2", "192.0.2.11")
	if err != nil || !strings.Contains(out, "1 received") {
		t.Fatalf("ping: %v\n%s", err, out)
	}
	name := a.Name
	a.Close()
	if netns.Exists(name) {
		t.Fatalf("namespace %s still exists after Close", name)
	}
}
