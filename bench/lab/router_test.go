package lab_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/lab/labtest"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
)

// pingSize sends one ping of size payload bytes from ns to dst, with DF ("do") or
// without ("dont"), and returns whether it was answered and what ping said.
func pingSize(t *testing.T, ns *netns.NS, dst string, size int, df string) (bool, string) {
	t.Helper()
	out, _ := ns.Run(context.Background(), "ping", "-c1", "-W1", "-M", df, "-s", strconv.Itoa(size), dst)
	return strings.Contains(out, " 1 received"), out
}

// TestPathMTU: SetPathMTU(1400) lets packets of 1400 bytes across the router and loses
// bigger ones, with DF (no ICMP comes back, so the sender learns nothing) and without
// (the fragments are dropped); within a LAN nothing changes; SetPathMTU(1500) closes
// the hole.
func TestPathMTU(t *testing.T) {
	testenv.NeedTools(t, "nft", "ping")
	l := labtest.New(t, lab.Spec{NoEtcd: true, Hosts: []lab.HostSpec{{Name: "a"}, {Name: "a2"}, {Name: "b", LAN: lab.LAN2}}})
	a, a2, b := l.Host("a"), l.Host("a2"), l.Host("b")
	ctx := context.Background()
	if err := l.SetPathMTU(ctx, 1400); err != nil {
		t.Fatal(err)
	}
	const hdr = 28 // IPv4 and ICMP headers
	for _, tc := range []struct {
		name string
		to   *lab.Host
		size int
		df   string
		want bool
	}{
		{"fits", b, 1400 - hdr, "do", true},
		{"DF over the hole", b, 1400 - hdr + 1, "do", false},
		{"fragments over the hole", b, 1400 - hdr + 1, "dont", false},
		{"same LAN", a2, 1500 - hdr, "do", true},
	} {
		if ok, out := pingSize(t, a.NS, tc.to.Addr.String(), tc.size, tc.df); ok != tc.want {
			t.Errorf("%s: %d bytes -M %s to %s answered %v, want %v\n%s", tc.name, tc.size+hdr, tc.df, tc.to.Addr, ok, tc.want, out)
		} else if strings.Contains(strings.ToLower(out), "frag needed") {
			t.Errorf("%s: the router told the sender of the hole:\n%s", tc.name, out)
		}
	}
	// Setting it again replaces the rules (no duplicate tables).
	if err := l.SetPathMTU(ctx, 1400); err != nil {
		t.Fatal(err)
	}
	if err := l.SetPathMTU(ctx, lab.UnderlayMTU); err != nil {
		t.Fatal(err)
	}
	if ok, out := pingSize(t, a.NS, b.Addr.String(), 1500-hdr, "do"); !ok {
		t.Errorf("after the hole: 1500 bytes with DF not answered\n%s", out)
	}
	if out, err := l.Router().Run(ctx, "nft", "list", "tables"); err != nil || strings.Contains(out, "weft-lab-hole") {
		t.Errorf("router tables after the hole: %v\n%s", err, out)
	}
	if err := l.SetPathMTU(ctx, 1501); !errors.Is(err, lab.ErrMTU) {
		t.Errorf("SetPathMTU(1501): %v, want ErrMTU", err)
	}
}
