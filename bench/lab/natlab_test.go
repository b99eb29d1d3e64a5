package lab_test

import (
	"context"
	"testing"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
)

// TestNATTopology: hosts of a site reach the internet (etcd included) through their
// masquerading router and each other without it; nothing outside reaches into a
// site; the router's counter counts what it routes and nothing else.
func TestNATTopology(t *testing.T) {
	testenv.NeedTools(t, "nft", "ping", "etcd")
	l := labtest.New(t, lab.Spec{Prefix: "wn", NoEtcd: true})
	ctx := context.Background()
	sites, err := l.BuildNAT(ctx, lab.NATSpec{Public: []string{"p"},
		Sites: []lab.SiteSpec{{Name: "a", Hosts: []string{"a1", "a2"}}, {Name: "b", Hosts: []string{"b1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := sites["a"], sites["b"]
	want := map[string]string{"p": "203.0.113.10", "a1": "192.0.2.10", "a2": "192.0.2.11", "b1": "198.51.100.10"}
	for name, addr := range want {
		if h := l.Host(name); h == nil || h.Addr.String() != addr {
			t.Fatalf("host %s: %+v, want address %s", name, h, addr)
		}
	}
	if a.Outside.String() != "203.0.113.2" || b.Outside.String() != "203.0.113.3" {
		t.Fatalf("routers' outside addresses %v %v", a.Outside, b.Outside)
	}
	if err := l.Put(ctx, lease.DefaultPrefix+"/config", lab.NetworkConfig("wireguard")); err != nil {
		t.Fatalf("etcd on the internet segment: %v", err)
	}
	a1, a2, b1, p := l.Host("a1").NS, l.Host("a2").NS, l.Host("b1").NS, l.Host("p").NS

	before, err := a.Forwarded(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ping(t, a1, "192.0.2.11") // within the site: not routed
	if n, err := a.Forwarded(ctx); err != nil || n != before {
		t.Fatalf("site a's router forwarded %d packets of a1 -> a2 (%v)", n-before, err)
	}
	ping(t, a1, "203.0.113.10") // out through the NAT
	ping(t, a2, "203.0.113.1")  // etcd's address
	ping(t, b1, "203.0.113.10")
	if n, err := a.Forwarded(ctx); err != nil || n < before+2 {
		t.Fatalf("site a's router forwarded %d packets of a1 -> p, want 2 (%v)", n-before, err)
	}
	// Nothing reaches into a site, not even from the other site.
	for _, dst := range []string{"192.0.2.10", "198.51.100.10"} {
		if out, err := p.Run(ctx, "ping", "-c1", "-W1", dst); err == nil {
			t.Fatalf("p reached %s inside a site:\n%s", dst, out)
		}
	}
	if out, err := a1.Run(ctx, "ping", "-c1", "-W1", "198.51.100.10"); err == nil {
		t.Fatalf("a1 reached b1 inside site b:\n%s", out)
	}
	testenv.NeedTools(t, "conntrack")
	if err := a.FlushConntrack(ctx); err != nil {
		t.Fatal(err)
	}
}
