package proxy

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/weftnet/weft/internal/ipconv"
)

func ip4(s string) uint32 { return ipconv.U32(netip.MustParseAddr(s)) }

func TestTableLookup(t *testing.T) {
	tb, err := NewTable(netip.MustParsePrefix("198.18.0.0/16"), 24)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.SetLocal(netip.MustParsePrefix("198.18.1.0/24")); err != nil {
		t.Fatal(err)
	}
	err = tb.Apply([]Route{
		{netip.MustParsePrefix("198.18.2.0/24"), netip.MustParseAddr("192.0.2.2")},
		{netip.MustParsePrefix("198.18.255.0/24"), netip.MustParseAddr("192.0.2.3")},
		{netip.MustParsePrefix("198.18.0.0/24"), netip.MustParseAddr("192.0.2.4")},
		{netip.MustParsePrefix("198.18.1.0/24"), netip.MustParseAddr("192.0.2.9")}, // ours: ignored
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := tb.Load()
	for _, c := range []struct {
		dst  string
		want string // public IP, "" for none
	}{
		{"198.18.2.1", "192.0.2.2"},
		{"198.18.2.255", "192.0.2.2"},
		{"198.18.255.7", "192.0.2.3"},
		{"198.18.0.0", "192.0.2.4"},
		{"198.18.1.5", ""}, // our own subnet
		{"198.18.3.1", ""}, // no lease
		{"198.19.2.1", ""}, // outside the network
		{"10.0.0.1", ""},
	} {
		p := s.Lookup(ip4(c.dst))
		got := ""
		if p != nil {
			got = p.PublicIP.String()
		}
		if got != c.want {
			t.Errorf("Lookup(%s) = %q, want %q", c.dst, got, c.want)
		}
	}
	if s.Len() != 3 || !s.HoldsLease(ip4("192.0.2.3")) || s.HoldsLease(ip4("192.0.2.9")) {
		t.Fatalf("Len %d, leases %v", s.Len(), s.Routes())
	}
	if err := tb.Apply(nil, []netip.Prefix{netip.MustParsePrefix("198.18.255.0/24")}); err != nil {
		t.Fatal(err)
	}
	if s2 := tb.Load(); s2.Lookup(ip4("198.18.255.7")) != nil || s2.HoldsLease(ip4("192.0.2.3")) {
		t.Fatal("removed route still there")
	}
	if s.Lookup(ip4("198.18.255.7")) == nil {
		t.Fatal("old snapshot changed under its reader")
	}
}

func TestTableOneHostTwoSubnets(t *testing.T) {
	tb, _ := NewTable(netip.MustParsePrefix("198.18.0.0/16"), 24)
	pub := netip.MustParseAddr("192.0.2.2")
	a, b := netip.MustParsePrefix("198.18.2.0/24"), netip.MustParsePrefix("198.18.3.0/24")
	if err := tb.Apply([]Route{{a, pub}, {b, pub}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := tb.Apply(nil, []netip.Prefix{a}); err != nil {
		t.Fatal(err)
	}
	if !tb.Load().HoldsLease(ipconv.U32(pub)) {
		t.Fatal("host lost its lease with one of two subnets")
	}
	// Re-adding a subnet with a new address moves it.
	if err := tb.Apply([]Route{{b, netip.MustParseAddr("192.0.2.7")}}, nil); err != nil {
		t.Fatal(err)
	}
	if s := tb.Load(); s.HoldsLease(ipconv.U32(pub)) || s.Len() != 1 {
		t.Fatalf("stale address after move: %v", s.Routes())
	}
}

func TestTableErrors(t *testing.T) {
	for _, c := range []struct {
		network string
		len     int
	}{{"198.18.0.0/16", 15}, {"198.18.0.0/16", 33}, {"10.0.0.0/8", 30}, {"2001:db8::/32", 64}} {
		if _, err := NewTable(netip.MustParsePrefix(c.network), c.len); !errors.Is(err, ErrBadRoute) {
			t.Errorf("NewTable(%s, %d) = %v, want ErrBadRoute", c.network, c.len, err)
		}
	}
	tb, _ := NewTable(netip.MustParsePrefix("198.18.0.0/16"), 24)
	pub := netip.MustParseAddr("192.0.2.2")
	for _, r := range []Route{
		{netip.MustParsePrefix("198.18.2.0/25"), pub},                            // wrong length
		{netip.MustParsePrefix("198.19.2.0/24"), pub},                            // outside
		{netip.MustParsePrefix("198.18.2.1/24"), pub},                            // not on a boundary
		{netip.MustParsePrefix("2001:db8::/24"), pub},                            // not IPv4
		{netip.MustParsePrefix("198.18.2.0/24"), netip.MustParseAddr("fe80::1")}, // IPv6, not global unicast
		{netip.MustParsePrefix("198.18.2.0/24"), netip.Addr{}},
	} {
		if err := tb.Apply([]Route{r}, nil); !errors.Is(err, ErrBadRoute) {
			t.Errorf("Apply(%v) = %v, want ErrBadRoute", r, err)
		}
	}
	if tb.Load().Len() != 0 {
		t.Fatal("bad routes were added")
	}
	if err := tb.SetLocal(netip.MustParsePrefix("198.18.2.0/23")); !errors.Is(err, ErrBadRoute) {
		t.Fatalf("SetLocal /23 = %v", err)
	}
}

// TestTableConcurrent swaps snapshots while readers look up; run it with -race.
// Every answer must be consistent: subnet i is always held by 192.0.2.i.
func TestTableConcurrent(t *testing.T) {
	tb, _ := NewTable(netip.MustParsePrefix("198.18.0.0/16"), 24)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var seen atomic.Int64
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				i := uint32((n + r) % 64)
				dst := ip4("198.18.0.9") + i<<8
				s := tb.Load()
				if p := s.Lookup(dst); p != nil {
					seen.Add(1)
					if want := ip4("192.0.2.0") + i; p.ip != want || !p.Subnet.Contains(addrOf(dst)) {
						t.Errorf("Lookup(%v) = %v via %v", addrOf(dst), p.Subnet, p.PublicIP)
						return
					}
				}
			}
		}()
	}
	for n := range 2000 {
		i := n % 64
		sub := netip.MustParsePrefix(fmt.Sprintf("198.18.%d.0/24", i))
		var err error
		if n%3 == 2 {
			err = tb.Apply(nil, []netip.Prefix{sub})
		} else {
			err = tb.Apply([]Route{{sub, netip.MustParseAddr(fmt.Sprintf("192.0.2.%d", i))}}, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if seen.Load() == 0 {
		t.Fatal("readers never found a route")
	}
}

func addrOf(a uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
}
