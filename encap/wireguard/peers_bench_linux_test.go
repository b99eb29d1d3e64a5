package wireguard

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/bench/netnstest"
)

// BenchmarkUserPeers reads a userspace device's peers as the chooser does each tick
// (status): wireguard-go's UAPI dump, and our parse of it, on n configured peers.
func BenchmarkUserPeers(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			u := benchUserWG(b, n)
			s, err := u.dev.IpcGet()
			if err != nil {
				b.Fatal(err)
			}
			text := []byte(s)
			b.Run("dump", func(b *testing.B) {
				for b.Loop() {
					if _, err := u.dev.IpcGet(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("parse", func(b *testing.B) {
				for b.Loop() {
					if got := parseUAPIPeers(text); len(got) != n {
						b.Fatalf("%d peers parsed, want %d", len(got), n)
					}
				}
			})
			b.Run("Peers", func(b *testing.B) {
				for b.Loop() {
					if got, err := u.Peers(); err != nil || len(got) != n {
						b.Fatalf("%d peers, %v; want %d", len(got), err, n)
					}
				}
			})
		})
	}
}

// benchUserWG is a userspace device in a namespace of its own with n peers, each
// with an endpoint and a /29, as the backend configures them.
func benchUserWG(b *testing.B, n int) *userWG {
	ns := netnstest.New(b, "wgpb")
	var u *userWG
	var drops wgDeviceDrops
	if err := ns.Do(func() (err error) {
		u, err = newUserWG("wgpb0", 1420, b.TempDir(), &drops, zap.NewNop())
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := ns.Do(u.Remove); err != nil {
			b.Error(err)
		}
	})
	c := wgtypes.Config{Peers: make([]wgtypes.PeerConfig, 0, n)}
	for i := range n {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			b.Fatal(err)
		}
		c.Peers = append(c.Peers, wgtypes.PeerConfig{
			PublicKey:         k.PublicKey(),
			Endpoint:          &net.UDPAddr{IP: net.IPv4(198, 51, 100+byte(i>>8), byte(i)), Port: 51820},
			ReplaceAllowedIPs: true,
			AllowedIPs:        []net.IPNet{{IP: netip.AddrFrom4([4]byte{198, 18, byte(i >> 5), byte(i << 3)}).AsSlice(), Mask: net.CIDRMask(29, 32)}},
		})
	}
	if err := u.Configure(c); err != nil {
		b.Fatal(err)
	}
	return u
}
