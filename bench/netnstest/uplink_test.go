package netnstest

import (
	"context"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/netns"
)

// links is `ip -br link` in ns, one line a link, without lo.
func links(t *testing.T, ns *netns.NS) []string {
	t.Helper()
	out, err := ns.Run(context.Background(), "ip", "-br", "link")
	if err != nil {
		t.Fatalf("ip link: %v", err)
	}
	var ls []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "" && !strings.HasPrefix(l, "lo ") {
			ls = append(ls, l)
		}
	}
	return ls
}

// peerOf is the name of the link whose peer is name in links (as links returns them).
func peerOf(links []string, name string) string {
	for _, l := range links {
		if n, peer, _ := strings.Cut(strings.Fields(l)[0], "@"); peer == name {
			return n
		}
	}
	return ""
}

// TestUplink: the link is up with a carrier and its addresses (IPv6 usable at once),
// routes leave by it, its peer is the only other link in the namespace and has the
// same name in every namespace, a second uplink gets another peer, and cleanup
// removes both ends; a taken name or bad address is an error that leaves the
// namespace as it was; a namespace gone before cleanup is no error.
func TestUplink(t *testing.T) {
	ns := New(t, "wt-up")
	ctx := context.Background()
	run := func(args ...string) string {
		t.Helper()
		out, err := ns.Run(ctx, "ip", args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	ok := t.Run("made", func(t *testing.T) {
		Uplink(t, ns, "eth0", "192.0.2.10/24", "2001:db8::10/64")
		ls := links(t, ns)
		peer := peerOf(ls, "eth0")
		if len(ls) != 2 || peer != uplinkPeer("eth0") {
			t.Fatalf("links %q, want eth0 and its peer %s", ls, uplinkPeer("eth0"))
		}
		for _, l := range ls {
			if f := strings.Fields(l); len(f) < 2 || f[1] != "UP" {
				t.Errorf("link %q not up with a carrier", l)
			}
		}
		addrs := run("-o", "addr", "show", "dev", "eth0", "scope", "global")
		for _, a := range []string{"inet 192.0.2.10/24", "inet6 2001:db8::10/64"} {
			if !strings.Contains(addrs, a) {
				t.Errorf("eth0 lacks %s:\n%s", a, addrs)
			}
		}
		if strings.Contains(addrs, "tentative") {
			t.Errorf("eth0 has a tentative address:\n%s", addrs)
		}
		for _, dst := range []string{"192.0.2.99", "2001:db8::99"} {
			if out := run("route", "get", dst); !strings.Contains(out, "dev eth0") {
				t.Errorf("route to %s not via eth0: %s", dst, out)
			}
		}
		if out := run("-o", "addr", "show", "dev", peer, "scope", "global"); strings.TrimSpace(out) != "" {
			t.Errorf("peer %s has addresses: %s", peer, out)
		}

		Uplink(t, ns, "ext1")
		if ls := links(t, ns); len(ls) != 4 {
			t.Errorf("links %q, want eth0, ext1 and a peer each", ls)
		}
		if out := run("-o", "addr", "show", "dev", "ext1", "scope", "global"); strings.TrimSpace(out) != "" {
			t.Errorf("ext1 has addresses it was not given: %s", out)
		}

		if err := AddUplink(t, ns, "eth0"); err == nil {
			t.Error("a second eth0: no error")
		}
		if err := AddUplink(t, ns, "bad", "192.0.2.300/24"); err == nil {
			t.Error("a bad address: no error")
		}
		if ls := links(t, ns); len(ls) != 4 {
			t.Errorf("links after the errors %q, want the 4 made before", ls)
		}
	})
	if !ok {
		return
	}
	if ls := links(t, ns); len(ls) != 0 {
		t.Errorf("links left after cleanup: %q", ls)
	}

	gone := New(t, "wt-up-gone")
	if !t.Run("namespace gone first", func(t *testing.T) {
		Uplink(t, gone, "eth0", "192.0.2.10/24")
		if peer := peerOf(links(t, gone), "eth0"); peer != uplinkPeer("eth0") {
			t.Errorf("eth0's peer is %q, want %s in every namespace", peer, uplinkPeer("eth0"))
		}
		if err := gone.Close(); err != nil {
			t.Fatal(err)
		}
	}) {
		t.Error("cleanup failed for an uplink whose namespace was gone")
	}
}
