package paths

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/weftnet/weft/encap"
	"go.uber.org/zap"
)

// listed lists the paths it holds.
type listed struct{ paths []encap.Path }

func (l *listed) Paths() []encap.Path { return l.paths }

// TestUnprobed: a path the backend changes before a round of probes on it was
// judged is counted; one changed after its first judged round, or one that goes
// away with its lease, is not.
func TestUnprobed(t *testing.T) {
	sn := netip.MustParsePrefix("198.18.2.0/24")
	path := func(ep string) encap.Path {
		return encap.Path{Backend: "test", Subnet: sn, PublicIP: netip.MustParseAddr("192.0.2.2"),
			Overlay: netip.MustParseAddr("198.18.2.0"), Local: netip.MustParseAddr("198.18.1.0"),
			Endpoint: netip.MustParseAddrPort(ep), MTU: 1420}
	}
	l := &listed{paths: []encap.Path{path("192.0.2.2:51820")}}
	pr := New(Config{}, l, zap.NewNop())
	pr.sockErr = [2]error{errors.New("no sockets in this test"), errors.New("no sockets in this test")}
	var wg sync.WaitGroup
	ctx, now := context.Background(), time.Now()
	refresh := func(ps ...encap.Path) {
		l.paths = ps
		now = now.Add(time.Second)
		pr.refresh(ctx, now, &wg)
	}
	refresh(path("192.0.2.2:51820"))
	refresh(path("203.0.113.2:51820")) // left before a round was judged
	if got := pr.Unprobed(); got != 1 {
		t.Fatalf("unprobed %d after a change before the first round, want 1", got)
	}
	pr.peers[sn].judge(now) // its first round: no answer
	refresh(path("127.0.0.1:40000"))
	if got := pr.Unprobed(); got != 1 {
		t.Fatalf("unprobed %d after a change past a judged round, want 1", got)
	}
	refresh() // the lease went
	if got := pr.Unprobed(); got != 1 {
		t.Fatalf("unprobed %d after the path went, want 1", got)
	}
	wg.Wait()
}
