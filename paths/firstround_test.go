package paths

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weftnet/weft/encap"
	"go.uber.org/zap"
)

// rounds lists the paths it holds and records the first rounds it is told of.
type rounds struct {
	paths  []encap.Path
	firsts []netip.Prefix
}

func (r *rounds) Paths() []encap.Path            { return r.paths }
func (r *rounds) FirstRound(subnet netip.Prefix) { r.firsts = append(r.firsts, subnet) }

// TestFirstRound: the backend is told once per path when the probes judged their
// first round on it, answered or not, and again for a changed path.
func TestFirstRound(t *testing.T) {
	sn := netip.MustParsePrefix("198.18.2.0/24")
	path := func(ep string) encap.Path {
		return encap.Path{Backend: "test", Subnet: sn, PublicIP: netip.MustParseAddr("192.0.2.2"),
			Overlay: netip.MustParseAddr("198.18.2.0"), Local: netip.MustParseAddr("198.18.1.0"),
			Endpoint: netip.MustParseAddrPort(ep), MTU: 1420}
	}
	r := &rounds{paths: []encap.Path{path("192.0.2.2:51820")}}
	pr := New(Config{}, r, zap.NewNop())
	pr.socks = [2]*rawSocket{{}, {}} // never used: no round is sent here
	var wg sync.WaitGroup
	ctx, now := context.Background(), time.Now()
	// round puts a round to the peer in flight, its answers' time over at now.
	round := func() {
		p := pr.peers[sn]
		p.pending, p.sent = true, now.Add(-pr.cfg.Timeout)
		pr.inflight = append(pr.inflight, p)
		pr.judgeDue(ctx, now)
	}
	pr.refresh(ctx, now, &wg)
	if len(r.firsts) != 0 {
		t.Fatalf("told %v before a round", r.firsts)
	}
	round()
	round()
	if !slices.Equal(r.firsts, []netip.Prefix{sn}) {
		t.Fatalf("told %v after two rounds, want the first once", r.firsts)
	}
	r.paths = []encap.Path{path("203.0.113.2:51820")} // a way left for another
	pr.refresh(ctx, now, &wg)
	round()
	if !slices.Equal(r.firsts, []netip.Prefix{sn, sn}) {
		t.Fatalf("told %v after the changed path's first round, want it again", r.firsts)
	}
	wg.Wait()
}

// TestFirstRoundNoSocket: a path the probes cannot probe (its family's socket could
// not be opened, as without CAP_NET_RAW) is told judged at once: the backend must
// not hold its way for a round that never comes.
func TestFirstRoundNoSocket(t *testing.T) {
	sn := netip.MustParsePrefix("198.18.2.0/24")
	r := &rounds{paths: []encap.Path{{Backend: "test", Subnet: sn, PublicIP: netip.MustParseAddr("192.0.2.2"),
		Overlay: netip.MustParseAddr("198.18.2.0"), Local: netip.MustParseAddr("198.18.1.0"), MTU: 1420}}}
	pr := New(Config{}, r, zap.NewNop())
	pr.sockErr = [2]error{errors.New("probe socket ip4:icmp: operation not permitted"), nil}
	var wg sync.WaitGroup
	pr.refresh(context.Background(), time.Now(), &wg)
	pr.refresh(context.Background(), time.Now(), &wg)
	if !slices.Equal(r.firsts, []netip.Prefix{sn}) {
		t.Fatalf("told %v, want the path once at its first refresh", r.firsts)
	}
	wg.Wait()
}
