package paths

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/encap"
)

var vxlanPath = encap.Path{
	Backend: "vxlan", Subnet: netip.MustParsePrefix("198.18.2.0/24"), PublicIP: netip.MustParseAddr("192.0.2.2"),
	Overlay: netip.MustParseAddr("198.18.2.0"), Local: netip.MustParseAddr("198.18.1.0"),
	Endpoint: netip.MustParseAddrPort("192.0.2.2:8472"), Proto: "UDP 8472", MTU: 1450,
}

// A round's answers, as letters: t tunnel, f full-size, u underlay; "-" none. With
// a search under way, the sizes answered are those up to the path's MTU mtu.
type round struct {
	got string
	mtu int
}

// play runs rounds through a new peer of path and returns it.
func play(path encap.Path, rounds []round) *peer {
	now := time.Unix(1_800_000_000, 0)
	p := newPeer(1, path, now)
	for _, r := range rounds {
		now = now.Add(2 * time.Second)
		p.got = answers{tunnel: strings.Contains(r.got, "t"), full: strings.Contains(r.got, "f"),
			underlay: strings.Contains(r.got, "u"), underlaySent: true, rtt: 300 * time.Microsecond,
			fullSent: p.lost == 0 && p.search == nil} // as sendRound sends it
		if p.search != nil && p.got.tunnel {
			for _, v := range p.search.sizes {
				if v <= r.mtu {
					p.got.sizes = append(p.got.sizes, v)
				}
			}
		}
		p.judge(now)
	}
	return p
}

func rep(r round, n int) []round {
	out := make([]round, n)
	for i := range out {
		out[i] = r
	}
	return out
}

func TestJudge(t *testing.T) {
	ok, lost, blocked, mtu := round{got: "tf"}, round{got: "-"}, round{got: "u"}, round{got: "t", mtu: 1350}
	hostgw := encap.Path{Backend: "host-gw", Subnet: vxlanPath.Subnet, PublicIP: vxlanPath.PublicIP, MTU: 1500}
	for _, tc := range []struct {
		name           string
		path           encap.Path
		rounds         []round
		state, reason  string
		pathMTU, route int
		detail         string // a part of the detail
	}{
		{"not probed", vxlanPath, nil, StateUnknown, "", 0, 0, ""},
		{"up", vxlanPath, []round{ok}, StateUp, "", 1450, 0, ""},
		{"one lost round is not trusted", vxlanPath, []round{ok, lost}, StateUp, "", 1450, 0, ""},
		{"two lost rounds are not trusted", vxlanPath, []round{ok, lost, lost}, StateUp, "", 1450, 0, ""},
		{"never answered: unknown until 3 rounds", vxlanPath, []round{lost, lost}, StateUnknown, "", 0, 0, ""},
		{"underlay silent too", vxlanPath, []round{ok, lost, lost, lost}, StateDown, ReasonUnderlay, 1450, 0, "does not answer ping"},
		{"host answers, tunnel does not", vxlanPath, []round{ok, blocked, blocked, blocked}, StateDown, ReasonEncap, 1450, 0, "UDP 8472"},
		{"the host stopped answering too", vxlanPath, append(rep(blocked, 4), lost, lost, lost), StateDown, ReasonUnderlay, 0, 0, "does not answer"},
		{"back after down: up, loss not held against it", vxlanPath, append(rep(blocked, 6), ok), StateUp, "", 0, 0, ""},
		{"full-size lost: path MTU found and set", vxlanPath, rep(mtu, 6), StateDegraded, ReasonPathMTU, 1350, 1350, "1350"},
		{"hole healed: MTU given back", vxlanPath, append(rep(mtu, 6), ok, ok), StateUp, "", 1450, 0, ""},
		{"one full-size answer is not enough to give it back", vxlanPath, append(rep(mtu, 6), ok), StateDegraded, ReasonPathMTU, 1350, 1350, ""},
		{"lossy", vxlanPath, []round{ok, lost, lost, ok, lost, lost, ok, lost, lost, ok}, StateDegraded, ReasonLoss, 1450, 0, "%"},
		{"host-gw: the public address is the path", hostgw, []round{{got: "u"}}, StateUp, "", 0, 0, ""},
		{"host-gw down", hostgw, []round{{got: "u"}, lost, lost, lost}, StateDown, ReasonUnderlay, 0, 0, "L2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := play(tc.path, tc.rounds)
			v := p.view()
			if v.State != tc.state || v.Reason != tc.reason || v.PathMTU != tc.pathMTU || v.RouteMTU != tc.route {
				t.Fatalf("state %s reason %q pathMTU %d routeMTU %d, want %s %q %d %d (detail %q)",
					v.State, v.Reason, v.PathMTU, v.RouteMTU, tc.state, tc.reason, tc.pathMTU, tc.route, v.Detail)
			}
			if !strings.Contains(v.Detail, tc.detail) {
				t.Fatalf("detail %q lacks %q", v.Detail, tc.detail)
			}
			if quiet := v.State == StateUp || v.State == StateUnknown; quiet != (v.Detail == "") {
				t.Fatalf("state %s with detail %q", v.State, v.Detail)
			}
		})
	}
}
