package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/lease"
)

// wgLeaseAttrs is the lease weftd on h wrote (found by its underlay address).
func wgLeaseAttrs(c *cluster, h *host) lease.Attrs {
	c.t.Helper()
	for k, v := range rawLeases(c.t, c) {
		a, err := lease.DecodeAttrs(v)
		if err != nil {
			c.t.Fatalf("lease %s: %v", k, err)
		}
		if a.PublicIP.String() == h.ip || a.PublicIPv6 == lab.HostAddr6(h.lh) {
			return a
		}
	}
	c.t.Fatalf("no lease of %s", h.name)
	return lease.Attrs{}
}

// wgData decodes a wireguard BackendData or BackendV6Data ("" and 0 when absent).
func wgData(c *cluster, raw json.RawMessage) (key string, port int) {
	c.t.Helper()
	if len(raw) == 0 || string(raw) == "null" {
		return "", 0
	}
	var d struct {
		PublicKey string
		Port      int
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		c.t.Fatalf("wireguard backend data %s: %v", raw, err)
	}
	return d.PublicKey, d.Port
}

// TestWireGuardIPv6: two weftd hosts on one LAN with an IPv6 underlay carry pod
// traffic over WireGuard in each family of an IPv6-only and a dual-stack network, in
// Mode separate (flannel-wg for IPv4 on ListenPort, flannel-wg-v6 for IPv6 on
// ListenPortV6, each peer's IPv6 side reached over IPv6) and auto (flannel-wg alone,
// each peer once with all its subnets, reached over IPv4 here). Leases, peers,
// addresses and routes are checked as flanneld writes and sets them; the IPv6
// device, deleted, is made again.
func TestWireGuardIPv6(t *testing.T) {
	const (
		v6only = `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"wireguard"%s}}`
		dual   = `{"Network":"198.18.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:db8::/48","Backend":{"Type":"wireguard"%s}}`
	)
	for _, tc := range []struct {
		name, config, opts string
		v4, single         bool
	}{
		{"ipv6-only", v6only, "", false, false},
		{"dual-stack", dual, "", true, false},
		{"dual-stack-auto", dual, `,"Mode":"auto"`, true, true},
		{"ipv6-only-auto", v6only, `,"Mode":"auto"`, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := wgCluster(t)
			c.putConfig(fmt.Sprintf(tc.config, tc.opts))
			a, b := c.addHost("a", "lan1"), c.addHost("b", "lan1")
			for _, h := range []*host{a, b} {
				if err := c.lab.EnableIPv6(context.Background(), h.lh); err != nil {
					t.Fatal(err)
				}
				startWG(c, h)
			}
			envA, envB := c.waitSubnetEnv(a), c.waitSubnetEnv(b)
			if envA.Subnet.IsValid() != tc.v4 || !envA.IPv6Subnet.IsValid() {
				t.Fatalf("subnet.env on a: %+v", envA)
			}
			pa, err := c.lab.AttachPod(context.Background(), a.lh, envA)
			if err != nil {
				t.Fatal(err)
			}
			pb, err := c.lab.AttachPod(context.Background(), b.lh, envB)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []struct{ from, to *lab.Pod }{{pa, pb}, {pb, pa}} {
				c.ping(d.from.NS, d.to.Addr6.String())
				if tc.v4 {
					c.ping(d.from.NS, d.to.Addr.String())
				}
			}

			// The leases: BackendData for IPv4 (ListenPort), BackendV6Data (ListenPortV6
			// in every Mode, as flanneld publishes it), one key.
			la, lb := wgLeaseAttrs(c, a), wgLeaseAttrs(c, b)
			if la.BackendType != "wireguard" {
				t.Fatalf("a's lease: BackendType %q", la.BackendType)
			}
			key4, port4 := wgData(c, la.BackendData)
			key6, port6 := wgData(c, la.BackendV6Data)
			if key6 == "" || port6 != 51821 || (tc.v4 && (key4 != key6 || port4 != 51820)) || (!tc.v4 && key4 != "") {
				t.Fatalf("a's lease: BackendData %s, BackendV6Data %s", la.BackendData, la.BackendV6Data)
			}
			keyB, _ := wgData(c, lb.BackendV6Data)

			dev6, ep6 := "flannel-wg-v6", netip.AddrPortFrom(lab.HostAddr6(b.lh), 51821).String()
			if tc.single {
				dev6 = "flannel-wg"
			}
			links := c.sh(a.ns, "ip -o link show")
			if strings.Contains(links, "flannel-wg-v6") == tc.single || strings.Contains(links, "flannel-wg:") != (tc.v4 || tc.single) {
				t.Fatalf("devices on a (Mode single %v, IPv4 %v):\n%s", tc.single, tc.v4, links)
			}
			// b as a's peer: its IPv6 subnet (and, on one device, its IPv4 one too)
			// reached over IPv6 on flannel-wg-v6; on one device over IPv4 (Mode auto
			// picks it when the peer's IPv4 address is public) unless the network is
			// IPv6-only.
			allowed, ep := envB.IPv6Subnet.String(), ep6
			if tc.single {
				ep = netip.AddrPortFrom(netip.MustParseAddr(b.ip), 51820).String()
				if tc.v4 {
					allowed = envB.Subnet.String() + "," + allowed
				} else {
					ep = netip.AddrPortFrom(lab.HostAddr6(b.lh), 51820).String()
				}
			}
			eventually(t, 10*time.Second, func() error {
				p, ok := wgPeers(c, a, dev6)[keyB]
				if !ok || p.endpoint != ep || p.allowed != allowed || p.handshake == 0 {
					return fmt.Errorf("peer b on %s of a: %+v; want endpoint %s, allowed-ips %s, a handshake", dev6, p, ep, allowed)
				}
				return nil
			})
			if tc.v4 && !tc.single {
				if p := wgPeers(c, a, "flannel-wg")[keyB]; p.endpoint != b.ip+":51820" || p.allowed != envB.Subnet.String() {
					t.Fatalf("peer b on flannel-wg of a: %+v", p)
				}
			}
			// The device as flanneld sets it up: our subnet's first address as /128, the
			// network routed to it, the MTU less 80.
			if addr := c.sh(a.ns, "ip -6 -o addr show dev "+dev6+" scope global"); !strings.Contains(addr, envA.IPv6Subnet.Addr().String()+"/128") {
				t.Fatalf("%s address on a: %q", dev6, addr)
			}
			if r := c.sh(a.ns, "ip -6 route show fd00:db8::/48"); !strings.Contains(r, "dev "+dev6+" ") {
				t.Fatalf("route to the IPv6 network on a: %q", r)
			}
			if link := c.sh(a.ns, "ip -o link show dev "+dev6); !strings.Contains(link, "mtu 1420") {
				t.Fatalf("%s on a: %q", dev6, link)
			}
			// The IPv6 device deleted from under weftd is made again.
			c.sh(a.ns, "ip link del "+dev6)
			a.pod = pa.NS
			pingWithin(t, a, pb.Addr6.String(), restartPingWithin)
			if addr := c.sh(a.ns, "ip -6 -o addr show dev "+dev6+" scope global"); !strings.Contains(addr, envA.IPv6Subnet.Addr().String()+"/128") {
				t.Fatalf("%s address on a after it was made again: %q", dev6, addr)
			}
		})
	}
}
