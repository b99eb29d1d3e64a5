package wireguard

import (
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

func wgTestConfig(t *testing.T, backend string, ipv6 bool) *lease.Config {
	t.Helper()
	raw := `{"Network":"198.18.0.0/16","SubnetLen":24`
	if ipv6 {
		raw += `,"EnableIPv6":true,"IPv6Network":"fd00:18::/56","IPv6SubnetLen":64`
	}
	raw += `,"Backend":` + backend + `}`
	cfg, err := lease.ParseConfig([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func wgTestTuning(t *testing.T) Tuning {
	d := t.TempDir()
	return Tuning{KeyFile: filepath.Join(d, "wgkey"), SocketDir: filepath.Join(d, "sock")}
}

// TestWireGuardOptions: flanneld's defaults and options, and the bad ones refused
// with the option named.
func TestWireGuardOptions(t *testing.T) {
	ext := encap.ExternalInterface{Name: "eth0", MTU: 1500, PublicIP: netip.MustParseAddr("192.0.2.10")}
	be, err := New(wgTestConfig(t, `{"Type":"wireguard"}`, false), ext, wgTestTuning(t), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	w := be.(*backend)
	if w.opts.ListenPort != 51820 || w.opts.ListenPortV6 != 51821 || w.opts.Mode != "separate" || w.keepalive != 0 || w.psk != nil {
		t.Fatalf("defaults: %+v", w.opts)
	}
	if be.MTU() != 1420 {
		t.Fatalf("MTU %d, want 1420 (1500 less flanneld's 80)", be.MTU())
	}
	psk, _ := wgtypes.GenerateKey()
	be, err = New(wgTestConfig(t, `{"Type":"wireguard","ListenPort":5000,"MTU":9000,"PSK":"`+psk.String()+
		`","PersistentKeepaliveInterval":25,"Mode":"auto"}`, false), ext, wgTestTuning(t), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	w = be.(*backend)
	if w.opts.ListenPort != 5000 || be.MTU() != 8920 || *w.psk != psk || w.keepalive != 25*time.Second || !w.single() {
		t.Fatalf("options: %+v", w.opts)
	}
	for _, c := range []struct{ backend, want string }{
		{`{"Type":"wireguard","Mode":"both"}`, "Mode"},
		{`{"Type":"wireguard","PSK":"nope"}`, "PSK"},
		{`{"Type":"wireguard","ListenPort":70000}`, "ListenPort"},
		{`{"Type":"wireguard","PersistentKeepaliveInterval":"25s"}`, "PersistentKeepaliveInterval"},
		{`{"Type":"wireguard","Device":"module"}`, "Device"},
		{`{"Type":"wireguard","MTU":600}`, "MTU"},
		{`{"Type":"wireguard","Port":1}`, "Port"},
	} {
		_, err := New(wgTestConfig(t, c.backend, false), ext, wgTestTuning(t), zaptest.NewLogger(t))
		if !errors.Is(err, encap.ErrBadOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a bad option naming %s", c.backend, err, c.want)
		}
	}
	// The environment's Device replaces the config's.
	tu := wgTestTuning(t)
	tu.Device = Userspace
	be, err = New(wgTestConfig(t, `{"Type":"wireguard","Device":"kernel"}`, false), ext, tu, zaptest.NewLogger(t))
	if err != nil || be.(*backend).device != Userspace {
		t.Fatalf("WEFT_WG_DEVICE over Backend.Device: %v", err)
	}
}

// TestWireGuardKeyFile: the key is made once, as `wg genkey` writes it (base64 and a
// newline, mode 0400), and read back the same; one written by wg genkey is read; a
// bad one is an error.
func TestWireGuardKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flannel", "wgkey")
	k, made, err := loadOrMakeKey(path)
	if err != nil || !made {
		t.Fatalf("first: made %v, %v", made, err)
	}
	data, err := os.ReadFile(path)
	if err != nil || string(data) != k.String()+"\n" {
		t.Fatalf("file %q, %v", data, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o400 {
		t.Fatalf("mode %v", fi.Mode())
	}
	again, made, err := loadOrMakeKey(path)
	if err != nil || made || again != k {
		t.Fatalf("second: made %v, same %v, %v", made, again == k, err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
	bad := filepath.Join(t.TempDir(), "wgkey")
	if err := os.WriteFile(bad, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadOrMakeKey(bad); err == nil {
		t.Fatal("a bad key file was accepted")
	}
}

func wgPeerLease(t *testing.T, subnet, pub, sn6, pub6 string, key wgtypes.Key, port, port6 int) lease.Lease {
	t.Helper()
	l := lease.Lease{Attrs: lease.Attrs{BackendType: "wireguard"}}
	if subnet != "" {
		l.Subnet = netip.MustParsePrefix(subnet)
		l.Attrs.PublicIP = netip.MustParseAddr(pub)
		l.Attrs.BackendData, _ = json.Marshal(wgLeaseData{PublicKey: key.PublicKey().String(), Port: uint16(port)})
	}
	if sn6 != "" {
		l.IPv6Subnet = netip.MustParsePrefix(sn6)
		l.Attrs.PublicIPv6 = netip.MustParseAddr(pub6)
		l.Attrs.BackendV6Data, _ = json.Marshal(wgLeaseData{PublicKey: key.PublicKey().String(), Port: uint16(port6)})
	}
	return l
}

// TestWireGuardPeerConfs: what each device gets for a peer, as flanneld computes it.
func TestWireGuardPeerConfs(t *testing.T) {
	ext := encap.ExternalInterface{Name: "eth0", MTU: 1500, PublicIP: netip.MustParseAddr("192.0.2.10"),
		PublicIPv6: netip.MustParseAddr("2001:db8::10")}
	key, _ := wgtypes.GeneratePrivateKey()
	pub := key.PublicKey()
	mk := func(raw string) *backend {
		be, err := New(wgTestConfig(t, raw, true), ext, wgTestTuning(t), zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		return be.(*backend)
	}
	dual := wgPeerLease(t, "198.18.7.0/24", "192.0.2.20", "fd00:18:0:7::/64", "2001:db8::20", key, 51820, 51821)

	sep := mk(`{"Type":"wireguard"}`)
	got, err := sep.peerConfs(dual)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] == nil || got[0].key != pub || got[0].endpoint.String() != "192.0.2.20:51820" || len(got[0].allowed) != 1 || got[0].allowed[0].String() != "198.18.7.0/24" {
		t.Fatalf("separate, flannel-wg: %+v", got[0])
	}
	if got[1] == nil || got[1].endpoint.String() != "[2001:db8::20]:51821" || got[1].allowed[0].String() != "fd00:18:0:7::/64" {
		t.Fatalf("separate, flannel-wg-v6: %+v", got[1])
	}

	// Port 0 (an older flanneld): our own port.
	old := wgPeerLease(t, "198.18.8.0/24", "192.0.2.21", "", "", key, 0, 0)
	if got, err := sep.peerConfs(old); err != nil || got[0].endpoint.String() != "192.0.2.21:51820" || got[1] != nil {
		t.Fatalf("port 0: %+v, %v", got, err)
	}

	// One device: both subnets on one peer; auto picks IPv4 for a public IPv4 address.
	auto := mk(`{"Type":"wireguard","Mode":"auto"}`)
	got, err = auto.peerConfs(dual)
	if err != nil || got[1] != nil || got[0].endpoint.String() != "192.0.2.20:51820" || len(got[0].allowed) != 2 {
		t.Fatalf("auto: %+v, %v", got[0], err)
	}
	v6 := mk(`{"Type":"wireguard","Mode":"ipv6"}`)
	// Over IPv6 the peer's one device is reached on its ListenPort (the IPv4 side's
	// Port), not on the ListenPortV6 of BackendV6Data, where it does not listen.
	if got, err := v6.peerConfs(dual); err != nil || got[0].endpoint.String() != "[2001:db8::20]:51820" {
		t.Fatalf("ipv6: %+v, %v", got[0], err)
	}
	// Auto with private IPv4 and public IPv6 on both sides: IPv6.
	private := wgPeerLease(t, "198.18.9.0/24", "10.0.0.20", "fd00:18:0:9::/64", "2001:db8::30", key, 51822, 51821)
	if got, err := auto.peerConfs(private); err != nil || got[0].endpoint.String() != "[2001:db8::30]:51822" {
		t.Fatalf("auto, private IPv4: %+v, %v", got[0], err)
	}
	// Auto, a peer without IPv4 (an IPv6-only lease): IPv6, on our own ListenPort.
	only := wgPeerLease(t, "", "", "fd00:18:0:a::/64", "2001:db8::40", key, 0, 51821)
	if got, err := auto.peerConfs(only); err != nil || got[0] == nil || got[0].endpoint.String() != "[2001:db8::40]:51820" {
		t.Fatalf("auto, IPv6-only: %+v, %v", got, err)
	}

	// Bad data: no key, not JSON.
	bad := dual
	bad.Attrs.BackendData = json.RawMessage(`{"PublicKey":"x"}`)
	if _, err := sep.peerConfs(bad); err == nil {
		t.Fatal("a bad PublicKey was accepted")
	}
	bad.Attrs.BackendData = json.RawMessage(`[]`)
	if _, err := sep.peerConfs(bad); err == nil {
		t.Fatal("BackendData that is not an object was accepted")
	}
}

// TestUAPIConfig: wgctrl's Config written as the UAPI set body wireguard-go reads.
func TestUAPIConfig(t *testing.T) {
	priv, _ := wgtypes.ParseKey("yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=")
	peer, _ := wgtypes.ParseKey("xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=")
	port, ka := 51820, 25*time.Second
	_, sn, _ := net.ParseCIDR("198.18.7.0/24")
	got := uapiConfig(wgtypes.Config{PrivateKey: &priv, ListenPort: &port, ReplacePeers: true, Peers: []wgtypes.PeerConfig{
		{PublicKey: peer, Endpoint: &net.UDPAddr{IP: net.ParseIP("192.0.2.20"), Port: 51820},
			PersistentKeepaliveInterval: &ka, ReplaceAllowedIPs: true, AllowedIPs: []net.IPNet{*sn}},
		{PublicKey: peer, Remove: true},
	}})
	want := "private_key=c809f3e5317e9575c9b5ed78b638b7ce530dabe85ddab6142202418" + "01ddf0669\n" +
		"listen_port=51820\nreplace_peers=true\n" +
		"public_key=c53201039adba14be71f886da1d8dbe9eebded08cb111b75340078999aa9f038\n" +
		"endpoint=192.0.2.20:51820\npersistent_keepalive_interval=25\nreplace_allowed_ips=true\nallowed_ip=198.18.7.0/24\n" +
		"public_key=c53201039adba14be71f886da1d8dbe9eebded08cb111b75340078999aa9f038\nremove=true\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
