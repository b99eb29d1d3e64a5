package wireguard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/paths/way"
)

// chooseLab is a namespace whose sends to the bench's peers (198.51.100.0/22) leave
// on a veth to a neighbour nobody is (a permanent entry): each ping costs what a
// real send costs, answered by no one, and nothing leaves the namespaces.
func chooseLab(b *testing.B) *netns.NS {
	a, r := netnstest.New(b, "wcb"), netnstest.New(b, "wcr")
	if err := netns.Veth(a, "veth0", r, "veth0"); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		ns   *netns.NS
		args []string
	}{
		{a, []string{"addr", "add", "192.0.2.10/24", "dev", "veth0"}},
		{a, []string{"link", "set", "lo", "up"}},
		{a, []string{"neigh", "add", "192.0.2.3", "lladdr", "02:00:00:00:00:03", "dev", "veth0", "nud", "permanent"}},
		{a, []string{"route", "add", "198.51.100.0/22", "via", "192.0.2.3"}},
		{r, []string{"link", "set", "lo", "up"}},
	} {
		if out, err := c.ns.Run(ctx, "ip", c.args...); err != nil {
			b.Fatalf("ip %v in %s: %v: %s", c.args, c.ns.Name, err, out)
		}
	}
	return a
}

// txPackets is how many packets left ns's veth0.
func txPackets(b *testing.B, ns *netns.NS) int {
	out, err := ns.Run(context.Background(), "cat", "/sys/class/net/veth0/statistics/tx_packets")
	if err != nil {
		b.Fatalf("tx_packets: %v: %s", err, out)
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkChoose is one tick of the chooser (choose: hellos, our NAT's address,
// every peer's evidence gathered and decided) on n peers outside our site, without a
// device: "direct" with every peer answering on its direct way (a healthy cluster),
// "relayed" with 8 answering relays and every other peer relayed (the costliest
// steady state: each is measured through every relay). Divide ns/op by 1e9 for the
// share of a core the chooser's 1 s tick takes. The path socket is in a namespace of
// its own (chooseLab): its pings leave on a veth.
func BenchmarkChoose(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		for _, relayed := range []bool{false, true} {
			name := "direct"
			if relayed {
				name = "relayed"
			}
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
				var w *backend
				lab := chooseLab(b)
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
				tx0 := txPackets(b, lab)
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					w.mu.Lock()
					w.choose(now.Add(time.Duration(i) * time.Second))
					w.mu.Unlock()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/peer")
				b.ReportMetric(float64(txPackets(b, lab)-tx0)/float64(b.N), "tx/op") // a GSO run counts once
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
