package proxy

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/tun/offload/offloadtest"
)

// TestTwoHostsIPv6: two hosts with real TUN devices in namespaces, dual-stack inside,
// over an IPv4 underlay and over an IPv6 one (2001:db8::/64 on the eth0s): ping and
// ping -6 between flannel0 and pod addresses both ways, and hostile IPv6 datagrams
// counted as drops.
func TestTwoHostsIPv6(t *testing.T) {
	testenv.NeedTools(t, "ping")
	for _, o := range []struct {
		name string
		labOpts
	}{
		{"dual-stack over IPv4", labOpts{queues: 2, v6: true}},
		{"dual-stack over IPv6", labOpts{queues: 2, under6: true}},
		{"dual-stack over IPv6, offload", labOpts{queues: 2, under6: true, offload: true}},
	} {
		t.Run(o.name, func(t *testing.T) { testTwoHostsIPv6(t, o.labOpts) })
	}
}

func testTwoHostsIPv6(t *testing.T, o labOpts) {
	l := newLab(t, o)
	a, b := l.hosts[0], l.hosts[1]
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		from     int
		src, dst string
	}{
		{"flannel0 a to b v6", 0, lab6Subnet[0].Addr().String(), lab6Subnet[1].Addr().String()},
		{"pod a to b v6", 0, lab6Pod[0].String(), lab6Pod[1].String()},
		{"pod b to a v6", 1, lab6Pod[1].String(), lab6Pod[0].String()},
		{"pod a to b v4", 0, labPod[0].String(), labPod[1].String()},
		{"pod b to a v4", 1, labPod[1].String(), labPod[0].String()},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := l.hosts[c.from].ns.Run(ctx, "ping", "-c", "3", "-i", "0.2", "-W", "2", "-I", c.src, c.dst)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
	sa, sb := a.px.Stats(), b.px.Stats()
	if sa.TxPackets < 9 || sb.RxPackets < 9 {
		t.Fatalf("pings not counted: a tx %d, b rx %d", sa.TxPackets, sb.RxPackets)
	}
	t.Run("no lease gives ICMPv6 no route", func(t *testing.T) {
		icmp := a.px.Stats().ICMPSent
		out, err := a.ns.Run(ctx, "ping", "-c", "1", "-W", "2", "-I", lab6Pod[0].String(), "fd00:10:0:77::1")
		if err == nil {
			t.Fatalf("ping -6 to a subnet without lease succeeded: %s", out)
		}
		if !containsAny(out, "Destination unreachable: No route") {
			t.Fatalf("no ICMPv6 no-route error in ping output: %s", out)
		}
		// The worker counts the error after its TUN write returns: await it.
		waitFor(t, "the ICMPv6 error counted", 5*time.Second, func() bool { return a.px.Stats().ICMPSent > icmp })
	})
	t.Run("v6 pod throughput", func(t *testing.T) {
		testenv.NeedTools(t, "iperf3")
		bps := iperf3(t, a.ns, b.ns, lab6Pod[0], lab6Pod[1], 1)
		t.Logf("iperf3 TCP over IPv6 inside a->b: %.2f Gbit/s", bps/1e9)
		if n := a.px.Stats().Dropped(DropSendError); n > 0 {
			t.Errorf("%d send errors (MTU?)", n)
		}
	})

	// Hostile datagrams from b's underlay address to a: each must be counted as its
	// drop, none delivered, the data path still forwarding afterwards.
	network, to, from := "udp4", net.IP(a.under.AsSlice()), net.IP(b.under.AsSlice())
	if o.under6 {
		network, to, from = "udp6", net.IP(a.under6.AsSlice()), net.IP(b.under6.AsSlice())
	}
	good := offloadtest.IPv6(lab6Pod[1], lab6Pod[0], 64, layers.IPProtocolUDP, make([]byte, 8))
	for _, c := range []struct {
		name string
		pkt  []byte
		want DropReason
	}{
		{"truncated", good[:30], DropTruncated},
		{"bad payload length", append(append([]byte(nil), good...), 1, 2, 3), DropBadLength},
		{"spoofed source", offloadtest.IPv6(lab6Pod[0], lab6Pod[0], 64, layers.IPProtocolUDP, nil), DropSpoofedSource},
		{"not ours", offloadtest.IPv6(lab6Pod[1], lab6Pod[1], 64, layers.IPProtocolUDP, nil), DropNotLocal},
		{"no lease there", offloadtest.IPv6(lab6Pod[1], lab6Network.Addr().Next(), 64, layers.IPProtocolUDP, nil), DropNotLocal},
		{"multicast", offloadtest.IPv6(lab6Pod[1], netip.MustParseAddr("ff02::1"), 64, layers.IPProtocolUDP, nil), DropNotUnicast},
		{"hop limit", offloadtest.IPv6(lab6Pod[1], lab6Pod[0], 1, layers.IPProtocolUDP, nil), DropTTL},
	} {
		t.Run("malformed: "+c.name, func(t *testing.T) {
			before := a.px.Stats().Dropped(c.want)
			err := b.ns.Do(func() error {
				conn, err := net.DialUDP(network, &net.UDPAddr{IP: from}, &net.UDPAddr{IP: to, Port: DefaultPort})
				if err != nil {
					return err
				}
				defer conn.Close()
				_, err = conn.Write(c.pkt)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, dropNames[c.want]+" drop", 5*time.Second, func() bool {
				return a.px.Stats().Dropped(c.want) > before
			})
		})
	}
	out, err := b.ns.Run(ctx, "ping", "-c", "1", "-W", "2", "-I", lab6Pod[1].String(), lab6Pod[0].String())
	if err != nil {
		t.Fatalf("after hostile datagrams: %v\n%s", err, out)
	}
	t.Logf("a: %+v", a.px.Stats())
}
