package netnstest

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/netip"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/netns"
)

// Uplink gives ns a link called name that is up and has addrs (prefixes such as
// "192.0.2.10/24" or "2001:db8::10/64"; IPv6 ones are added without duplicate
// address detection, so they are usable at once), as a stand-in for a host's uplink
// (eth0 with the default route, a second interface such as ext1) or for any device a
// route can name. It fails t at once on error, so call it from the test's goroutine;
// elsewhere use AddUplink.
//
// The link is one end of a veth whose other end stays in ns, up and without
// addresses, so that name has a carrier (this machine has no dummy links). The
// peer's name is "ul" and eight hex digits, a hash of name: the same in every
// namespace and run (so that views of two hosts compare equal, its kernel routes
// included) and matching no pattern for name, which it does not contain. The link
// (and its peer) is removed at t's cleanup, unless it or ns is gone by then.
func Uplink(t testing.TB, ns *netns.NS, name string, addrs ...string) {
	t.Helper()
	if err := AddUplink(t, ns, name, addrs...); err != nil {
		t.Fatal(err)
	}
}

// AddUplink is Uplink returning the error instead of failing t, for a goroutine
// other than the test's or a helper that returns errors. When it fails it has
// removed what it made.
func AddUplink(t testing.TB, ns *netns.NS, name string, addrs ...string) error {
	t.Helper()
	ctx := context.Background()
	peer := uplinkPeer(name)
	cmds := [][]string{
		{"link", "set", peer, "up"},
		{"link", "set", name, "up"},
	}
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return fmt.Errorf("uplink %s in %s: %w", name, ns.Name, err)
		}
		cmd := []string{"addr", "add", p.String(), "dev", name}
		if p.Addr().Is6() {
			cmd = append(cmd, "nodad")
		}
		cmds = append(cmds, cmd)
	}
	if _, err := ns.Run(ctx, "ip", "link", "add", name, "type", "veth", "peer", "name", peer); err != nil {
		return fmt.Errorf("uplink %s in %s: %w", name, ns.Name, err)
	}
	for _, cmd := range cmds {
		if _, err := ns.Run(ctx, "ip", cmd...); err != nil {
			_ = delUplink(ns, name)
			return fmt.Errorf("uplink %s in %s: %w", name, ns.Name, err)
		}
	}
	t.Cleanup(func() {
		if err := delUplink(ns, name); err != nil {
			t.Errorf("remove uplink %s in %s: %v", name, ns.Name, err)
		}
	})
	return nil
}

// uplinkPeer names the peer of the uplink called name.
func uplinkPeer(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("ul%08x", h.Sum32())
}

// delUplink deletes the link called name in ns, and with it its peer; a link or
// namespace already gone is no error.
func delUplink(ns *netns.NS, name string) error {
	ctx := context.Background()
	if !netns.Exists(ns.Name) {
		return nil
	}
	if out, err := ns.Run(ctx, "ip", "link", "show", "dev", name); err != nil {
		if strings.Contains(out, "does not exist") {
			return nil
		}
		return err
	}
	_, err := ns.Run(ctx, "ip", "link", "del", "dev", name)
	return err
}
