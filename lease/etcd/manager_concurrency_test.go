package etcd

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/lease"
)

// TestAcquireConcurrent has N hosts acquire at once from a network of exactly N
// subnets: every one gets its own, and one more host finds none free.
func TestAcquireConcurrent(t *testing.T) {
	const n = 8
	const cfg = `{"Network":"198.18.0.0/21","SubnetMin":"198.18.0.0","SubnetMax":"198.18.7.0"}` // 8 × /24
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		s := newStore(t, srv, api)
		ms := make([]*Manager, n+1)
		for i := range ms {
			ms[i] = newManager(t, s, cfg, ManagerOptions{})
		}
		ip := func(i int) netip.Addr { return addr(fmt.Sprintf("192.0.2.%d", 100+i)) }
		ctx := testCtx(t, 2*time.Minute)
		start := make(chan struct{})
		got := make([]lease.Lease, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[i], errs[i] = ms[i].Acquire(ctx, lease.Attrs{PublicIP: ip(i), BackendType: "udp"})
			}()
		}
		close(start)
		wg.Wait()
		seen := map[netip.Prefix]int{}
		for i := 0; i < n; i++ {
			if errs[i] != nil {
				t.Fatalf("host %d: %v", i, errs[i])
			}
			if j, dup := seen[got[i].Subnet]; dup {
				t.Fatalf("hosts %d and %d both hold %v", j, i, got[i].Subnet)
			}
			seen[got[i].Subnet] = i
		}
		stored := leaseMap(t, s.reg)
		if len(stored) != n {
			t.Fatalf("%d leases stored, want %d: %v", len(stored), n, stored)
		}
		for sub, i := range seen {
			if stored[sub].Attrs.PublicIP != ip(i) {
				t.Errorf("%v stored for %v, want %v", sub, stored[sub].Attrs.PublicIP, ip(i))
			}
		}
		if l, err := ms[n].Acquire(ctx, lease.Attrs{PublicIP: ip(n), BackendType: "udp"}); !errors.Is(err, ErrNoFreeSubnet) {
			t.Fatalf("host %d: Acquire = %v, %v; want ErrNoFreeSubnet", n, l, err)
		}
	})
}

// TestAcquirePublicIPConflict: a second host presenting the same PublicIP under
// another identity must not share (or steal) the first one's subnet.
func TestAcquirePublicIPConflict(t *testing.T) {
	eachAPI(t, func(t *testing.T, srv *etcdproc.Server, api string) {
		s := newStore(t, srv, api)
		const cfg = `{"Network":"198.18.0.0/16"}`
		first, second := newManager(t, s, cfg, ManagerOptions{}), newManager(t, s, cfg, ManagerOptions{})
		ctx := testCtx(t, time.Minute)
		attrs := lease.Attrs{PublicIP: ourIP, BackendType: "udp"}
		l1, err := first.Acquire(ctx, attrs)
		if err != nil {
			t.Fatal(err)
		}
		if l2, err := second.Acquire(ctx, attrs); !errors.Is(err, ErrPublicIPConflict) {
			t.Fatalf("second host: Acquire = %v, %v; want ErrPublicIPConflict", l2, err)
		}
		// The first host keeps its lease, and gets the same one again.
		if got := leaseMap(t, s.reg)[l1.Subnet]; got.Attrs.HostID != l1.Attrs.HostID {
			t.Fatalf("lease of the first host now %+v", got.Attrs)
		}
		if again, err := first.Acquire(ctx, attrs); err != nil || again.Subnet != l1.Subnet {
			t.Fatalf("first host again: %v, %v; want %v", again.Subnet, err, l1.Subnet)
		}
	})
}
