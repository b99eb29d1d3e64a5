package wireguard

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/paths/way"
)

// BenchmarkChoose is one tick of the chooser (choose: hellos, our NAT's address,
// every peer's evidence gathered and decided) on n peers outside our site, without a
// device: "direct" with every peer answering on its direct way (a healthy cluster),
// "relayed" with 8 answering relays and every other peer relayed (the costliest
// steady state: each is measured through every relay). Divide ns/op by 1e9 for the
// share of a core the chooser's 1 s tick takes. The path socket is in a namespace of
// its own (netnstest.Sink): its pings leave on a veth.
func BenchmarkChoose(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		for _, relayed := range []bool{false, true} {
			name := "direct"
			if relayed {
				name = "relayed"
			}
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
				var w *backend
				lab := netnstest.Sink(b, "wcb", "198.51.100.0/22")
				if err := lab.Do(func() error {
					w = sitesBackendOn(b, lease.Attrs{Site: "a", SiteIP: netip.MustParseAddr("192.0.2.10")}, netip.Addr{})
					return nil
				}); err != nil {
					b.Fatal(err)
				}
				w.log = zap.NewNop()
				w.cfg.SubnetLen = 29
				evs := make([]lease.Event, 0, n)
				for i := range n {
					evs = append(evs, lease.Event{Type: lease.Added, Lease: benchPeer(b, i)})
				}
				w.HandleEvents(b.Context(), evs)
				now := time.Now()
				for i, l := range evs {
					ws := w.ways[l.Lease.Subnet]
					ws.First = false
					if relayed && i >= maxRelays {
						ws.Move(way.Relay, "relay: bench", now)
						ws.Relay, ws.RelayAddr = evs[i%maxRelays].Lease.Subnet, w.pathAddr(evs[i%maxRelays].Lease.Subnet)
						continue
					}
					ws.Probed(true, now)
				}
				tx0 := netnstest.TxPackets(b, lab)
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					w.mu.Lock()
					w.choose(now.Add(time.Duration(i) * time.Second))
					w.mu.Unlock()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/peer")
				b.ReportMetric(float64(netnstest.TxPackets(b, lab)-tx0)/float64(b.N), "tx/op") // a GSO run counts once
			})
		}
	}
}

// benchPeer is the lease of peer i of site b: a /29 of 198.18.0.0/16, dialable at
// 198.51.100.0/22 + i.
func benchPeer(b *testing.B, i int) lease.Lease {
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		b.Fatal(err)
	}
	data, _ := json.Marshal(wgLeaseData{PublicKey: k.PublicKey().String(), Port: 51820})
	pub := netip.AddrFrom4([4]byte{198, 51, 100 + byte(i>>8), byte(i)})
	sub := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte((i + 1) >> 5), byte((i + 1) << 3)}), 29)
	return lease.Lease{Subnet: sub, Attrs: lease.Attrs{PublicIP: pub, BackendType: wireguardType, BackendData: data, Site: "b"}}
}
