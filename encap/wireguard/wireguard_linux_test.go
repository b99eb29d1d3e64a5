package wireguard

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// TestWireGuardUserspacePair: two namespaces joined by a veth, each with the
// wireguard backend on a userspace device: the devices as flanneld's (address,
// route, MTU), a handshake the devices start themselves, a ping between their
// addresses through the tunnel, the UAPI socket answering, and nothing left once
// closed.
func TestWireGuardUserspacePair(t *testing.T) {
	ctx := context.Background()
	nsA, nsB := netnstest.New(t, "weft-wga"), netnstest.New(t, "weft-wgb")
	if out, err := nsA.Run(ctx, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", nsB.Name); err != nil {
		t.Fatalf("veth: %v: %s", err, out)
	}
	type side struct {
		ns   *netns.NS
		ip   string
		sn   string
		be   encap.Backend
		dir  string
		data []byte
	}
	sides := []*side{{ns: nsA, ip: "192.0.2.10", sn: "198.18.1.0/24"}, {ns: nsB, ip: "192.0.2.20", sn: "198.18.2.0/24"}}
	cfg := wgTestConfig(t, `{"Type":"wireguard","Device":"userspace"}`, false)
	for _, s := range sides {
		for _, cmd := range [][]string{{"addr", "add", s.ip + "/24", "dev", "eth0"}, {"link", "set", "eth0", "up"}} {
			if out, err := s.ns.Run(ctx, "ip", cmd...); err != nil {
				t.Fatalf("%v: %v: %s", cmd, err, out)
			}
		}
		s.dir = t.TempDir()
		ext := encap.ExternalInterface{Name: "eth0", MTU: 1500, IfaceIP: netip.MustParseAddr(s.ip), PublicIP: netip.MustParseAddr(s.ip)}
		be, err := New(cfg, ext, Tuning{KeyFile: filepath.Join(s.dir, "wgkey"),
			SocketDir: filepath.Join(s.dir, "sock")}, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		s.be = be
		t.Cleanup(func() { _ = be.Close() })
		if err := s.ns.Do(func() error {
			s.data, err = be.BackendData(ctx)
			if err != nil {
				return err
			}
			return be.Register(ctx, lease.Lease{Subnet: netip.MustParsePrefix(s.sn), Attrs: lease.Attrs{PublicIP: ext.PublicIP}})
		}); err != nil {
			t.Fatal(err)
		}
	}
	added := time.Now()
	for i, s := range sides {
		o := sides[1-i]
		peer := lease.Lease{Subnet: netip.MustParsePrefix(o.sn),
			Attrs: lease.Attrs{PublicIP: netip.MustParseAddr(o.ip), BackendType: "wireguard", BackendData: o.data}}
		if err := s.ns.Do(func() error {
			s.be.HandleEvents(ctx, []lease.Event{{Type: lease.Added, Lease: peer}})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	a, b := sides[0], sides[1]
	for _, c := range []struct{ args, want []string }{
		{[]string{"-o", "link", "show", "dev", "flannel-wg"}, []string{"mtu 1420", "UP"}},
		{[]string{"-4", "-o", "addr", "show", "dev", "flannel-wg"}, []string{"198.18.1.0/32"}},
		{[]string{"-4", "route", "show", "198.18.0.0/16"}, []string{"dev flannel-wg", "scope link"}},
	} {
		out, err := a.ns.Run(ctx, "ip", c.args...)
		for _, w := range c.want {
			if err != nil || !strings.Contains(out, w) {
				t.Fatalf("ip %v: %q (%v), want %q", c.args, out, err, w)
			}
		}
	}
	// No traffic before the handshake: a ping from the side with the smaller key
	// would start one of its own that crosses the kicker's, and both would wait for
	// WireGuard's retry.
	took, err := awaitHandshakes(a.be, b.be, added)
	if err != nil {
		t.Fatalf("first handshake: %v", err)
	}
	t.Logf("first handshake complete on both sides %v after the peers were added", took)
	if out, err := a.ns.Run(ctx, "ping", "-c", "1", "-W", "2", "198.18.2.0"); err != nil {
		t.Fatalf("ping through the tunnel: %v: %s", err, out)
	}
	if got := deviceKind(a.be); got != Userspace {
		t.Fatalf("device %s is %q, want %q", Device, got, Userspace)
	}
	// The UAPI socket answers `get` as wireguard-go's does.
	sock := filepath.Join(a.dir, "sock", "flannel-wg.sock")
	if got := uapiGet(t, sock); !strings.Contains(got, "listen_port=51820") || !strings.Contains(got, "allowed_ip=198.18.2.0/24") {
		t.Fatalf("UAPI get: %q", got)
	}

	// The device's endpoint for b moved (as it roams to where b's datagrams come
	// from); b's lease again, unchanged for the device (an attribute of its own
	// republished), leaves it there: configuring it again would reset it.
	roamed := netip.MustParseAddrPort("192.0.2.99:51820")
	var bData wgLeaseData
	if err := json.Unmarshal(b.data, &bData); err != nil {
		t.Fatal(err)
	}
	bKey, err := wgtypes.ParseKey(bData.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ns.Do(func() error {
		return a.be.(*backend).devs[0].Configure(wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: bKey, UpdateOnly: true,
			Endpoint: net.UDPAddrFromAddrPort(roamed)}}})
	}); err != nil {
		t.Fatal(err)
	}
	again := lease.Lease{Subnet: netip.MustParsePrefix(b.sn), Attrs: lease.Attrs{PublicIP: netip.MustParseAddr(b.ip),
		BackendType: "wireguard", BackendData: b.data, Outside: netip.MustParseAddrPort("203.0.113.9:51820")}}
	if err := a.ns.Do(func() error {
		a.be.HandleEvents(ctx, []lease.Event{{Type: lease.Added, Lease: again}})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := uapiGet(t, sock); !strings.Contains(got, "endpoint="+roamed.String()) {
		t.Fatalf("b's lease again, unchanged for the device: UAPI get %q, want the endpoint left at %v", got, roamed)
	}

	// The device deleted from under the backend, and a peer added meanwhile: a repair
	// pass makes the device again with both peers, its address and route, the route
	// MTU path repair had set, and the tunnel carries a ping again.
	if err := a.ns.Do(func() error { return a.be.(*backend).SetRouteMTU(netip.MustParsePrefix("198.18.2.0/24"), 1300) }); err != nil {
		t.Fatal(err)
	}
	if out, err := a.ns.Run(ctx, "ip", "link", "del", "flannel-wg"); err != nil {
		t.Fatalf("ip link del: %v: %s", err, out)
	}
	deleted := time.Now()
	otherKey, _ := wgtypes.GeneratePrivateKey()
	other := wgPeerLease(t, "198.18.3.0/24", "192.0.2.30", "", "", otherKey, 51820, 0)
	if err := a.ns.Do(func() error {
		a.be.HandleEvents(ctx, []lease.Event{{Type: lease.Added, Lease: other}})
		a.be.(*backend).repair()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := uapiGet(t, sock); !strings.Contains(got, "allowed_ip=198.18.2.0/24") || !strings.Contains(got, "allowed_ip=198.18.3.0/24") {
		t.Fatalf("UAPI get after the repair: %q", got)
	}
	if out, err := a.ns.Run(ctx, "ip", "-4", "-o", "addr", "show", "dev", "flannel-wg"); err != nil || !strings.Contains(out, "198.18.1.0/32") {
		t.Fatalf("address after the repair: %q (%v)", out, err)
	}
	if out, err := a.ns.Run(ctx, "ip", "-4", "route", "show", "198.18.2.0/24"); err != nil || !strings.Contains(out, "dev flannel-wg") ||
		!strings.Contains(out, "mtu 1300") {
		t.Fatalf("route to the peer's subnet after the repair: %q (%v), want its mtu 1300 again", out, err)
	}
	// The new device has no session, and b keeps its session with the old one: the
	// new device starts the handshake itself, with no traffic to ask for it, and then
	// carries a ping each way at once.
	took, err = awaitHandshakes(a.be, b.be, deleted)
	if err != nil {
		t.Fatalf("handshake of the device made again: %v", err)
	}
	t.Logf("handshake of the device made again complete on both sides %v after the device was deleted", took)
	for _, p := range []struct {
		from *side
		dst  string
	}{{b, "198.18.1.0"}, {a, "198.18.2.0"}} {
		if out, err := p.from.ns.Run(ctx, "ping", "-c", "1", "-W", "2", p.dst); err != nil {
			t.Fatalf("ping %s through the device made again: %v: %s", p.dst, err, out)
		}
	}
	r := a.be.(*backend).Report()
	if got := r.Repairs; got["device"] != 1 || got["route"] != 0 {
		t.Fatalf("repairs %v, want one device", got)
	}
	// The userspace device's initiations are reported (the pair answers: none left
	// out of the table).
	if c, ok := r.Stats.(*stats).Initiations[Device]; !ok || c.NotKept != 0 {
		t.Fatalf("initiations of %s: %+v (reported: %v), want reported, none not kept", Device, c, ok)
	}
	if err := a.ns.Do(func() error {
		a.be.HandleEvents(ctx, []lease.Event{{Type: lease.Removed, Lease: other}})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A peer's lease gone: its peer goes.
	if err := a.ns.Do(func() error {
		a.be.HandleEvents(ctx, []lease.Event{{Type: lease.Removed, Lease: lease.Lease{Subnet: netip.MustParsePrefix("198.18.2.0/24"),
			Attrs: lease.Attrs{PublicIP: netip.MustParseAddr("192.0.2.20"), BackendType: "wireguard", BackendData: sides[1].data}}}})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if a.be.(*backend).Report().Peers != 0 {
		t.Fatal("the peer stayed after its lease went")
	}
	if err := a.be.Close(); err != nil {
		t.Fatal(err)
	}
	// The device stays (persistent), with its address and route, for the next weftd.
	if out, err := a.ns.Run(ctx, "ip", "-d", "addr", "show", "flannel-wg"); err != nil || !strings.Contains(out, "persist on") {
		t.Fatalf("flannel-wg not left persistent after Close: %v %s", err, out)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("UAPI socket left after Close: %v", err)
	}
}

// awaitHandshakes waits until the devices of x and y have each completed a handshake
// with the other after since: the initiator's when the response came, the
// responder's when the first packet of the session came (key confirmation), so
// that each side then sends with the new session. The kickers start it within
// kickDelay of the peers being given to a device; a handshake that came only after
// WireGuard's RekeyTimeout (5 s) would be WireGuard's retry of a lost or crossed
// initiation, which is what the kickers are there to spare: the bound is since +
// RekeyTimeout. It returns how long after since both had it.
func awaitHandshakes(x, y encap.Backend, since time.Time) (time.Duration, error) {
	bx, by := x.(*backend), y.(*backend)
	pairs := []struct {
		dev  *backend
		peer wgtypes.Key
	}{{bx, by.priv.PublicKey()}, {by, bx.priv.PublicKey()}}
	deadline := since.Add(device.RekeyTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var missing []string
		for _, p := range pairs {
			p.dev.mu.Lock()
			st := p.dev.status()
			p.dev.mu.Unlock()
			if h := st[p.peer].handshake; !h.After(since) {
				missing = append(missing, fmt.Sprintf("%v with %v (last %v)", p.dev.priv.PublicKey(), p.peer, h))
			}
		}
		if len(missing) == 0 {
			return time.Since(since), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no handshake within %v: %s", device.RekeyTimeout, strings.Join(missing, "; "))
		}
		<-tick.C
	}
}

// deviceKind is the implementation of be's IPv4 device.
func deviceKind(be encap.Backend) string {
	w := be.(*backend)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.devs[0] == nil {
		return ""
	}
	return w.devs[0].Kind()
}

// uapiGet asks the UAPI socket at sock for the device's configuration.
func uapiGet(t *testing.T, sock string) string {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("get=1\n\n"))
	var b strings.Builder
	buf := make([]byte, 4096)
	for !strings.HasSuffix(b.String(), "\n\n") {
		n, err := c.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}

// TestHandshaken: the peers of a UAPI get body that have had a handshake.
func TestHandshaken(t *testing.T) {
	a, b := [32]byte{1}, [32]byte{2}
	body := "private_key=00\nlisten_port=51820\n" +
		"public_key=" + hex.EncodeToString(a[:]) + "\nlast_handshake_time_sec=0\nlast_handshake_time_nsec=0\n" +
		"public_key=" + hex.EncodeToString(b[:]) + "\nendpoint=192.0.2.1:51820\nlast_handshake_time_sec=1795677574\n" +
		"errno=0\n\n"
	got := handshaken(body)
	if len(got) != 1 || !got[b] || got[a] {
		t.Fatalf("handshaken: %v", got)
	}
}
