package proxy

import (
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"go.uber.org/zap"

	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/tun"
)

func TestTwoHosts(t *testing.T) {
	testenv.NeedTools(t, "ping", "iperf3")
	for _, o := range []struct {
		name string
		labOpts
	}{
		{"plain", labOpts{queues: 2}},
		{"one queue, no mmsg", labOpts{queues: 1, cfg: Config{Tuning: Tuning{NoMmsg: true, NoReusePort: true}}}},
		{"offload", labOpts{queues: 2, offload: true}},
		{"busy poll", labOpts{queues: 2, offload: true, cfg: Config{BusyPoll: time.Millisecond}}},
		{"busy poll, plain", labOpts{queues: 1, cfg: Config{BusyPoll: 100 * time.Microsecond}}},
	} {
		t.Run(o.name, func(t *testing.T) { testTwoHosts(t, o.labOpts) })
	}
}

func testTwoHosts(t *testing.T, o labOpts) {
	l := newLab(t, o)
	a, b := l.hosts[0], l.hosts[1]
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		from     int
		src, dst string
	}{
		{"flannel0 a to b", 0, labSubnet[0].Addr().String(), labSubnet[1].Addr().String()},
		{"flannel0 b to a", 1, labSubnet[1].Addr().String(), labSubnet[0].Addr().String()},
		{"pod a to b", 0, labPod[0].String(), labPod[1].String()},
		{"pod b to a", 1, labPod[1].String(), labPod[0].String()},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := l.hosts[c.from].ns.Run(ctx, "ping", "-c", "3", "-i", "0.2", "-W", "2", "-I", c.src, c.dst)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	bps := iperf3(t, a.ns, b.ns, labPod[0], labPod[1], 2)
	runtime.ReadMemStats(&m1)
	t.Logf("iperf3 TCP a->b: %.2f Gbit/s", bps/1e9)
	sa, sb := a.px.Stats(), b.px.Stats()
	// No allocation per packet: the transfer moved >100k packets; the process (test
	// helpers included) may allocate a few thousand times.
	if mallocs := m1.Mallocs - m0.Mallocs; mallocs > sa.TxPackets/20 {
		t.Errorf("%d allocations while forwarding %d packets", mallocs, sa.TxPackets)
	} else {
		t.Logf("%d allocations while forwarding %d packets", mallocs, sa.TxPackets+sb.RxPackets)
	}
	t.Logf("a: %+v", sa)
	t.Logf("b: %+v", sb)
	if sa.TxPackets == 0 || sb.RxPackets == 0 {
		t.Fatalf("no packets counted: a tx %d, b rx %d", sa.TxPackets, sb.RxPackets)
	}
	if busy := o.cfg.BusyPoll > 0; busy != (sa.PollSleeps > 0) {
		// Pings 200 ms apart leave every busy poller idle for longer than its window.
		t.Errorf("busy poll %s, but %d sleeps in poll(2)", o.cfg.BusyPoll, sa.PollSleeps)
	}

	t.Run("inject from non-lease address", func(t *testing.T) {
		mustRun(t, b.ns, "ip", "addr", "add", "192.0.2.99/24", "dev", "eth0")
		before := a.px.Stats().Dropped(DropUnknownSource)
		// A well-formed inner packet from b's subnet to a's pod, sent from 192.0.2.99.
		pkt := ipv4Packet(labPod[1], labPod[0], 64, layers.IPProtocolUDP, make([]byte, 8))
		err := b.ns.Do(func() error {
			c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP("192.0.2.99")},
				&net.UDPAddr{IP: a.under.AsSlice(), Port: DefaultPort})
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write(pkt)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "unknown_source drop", 5*time.Second, func() bool {
			return a.px.Stats().Dropped(DropUnknownSource) > before
		})
	})

	t.Run("no lease gives net unreachable", func(t *testing.T) {
		out, err := a.ns.Run(ctx, "ping", "-c", "1", "-W", "2", "-I", labPod[0].String(), "198.18.77.1")
		if err == nil {
			t.Fatalf("ping to a subnet without lease succeeded: %s", out)
		}
		if !containsAny(out, "Net Unreachable", "Destination Net Unreachable") {
			t.Fatalf("no net unreachable in ping output: %s", out)
		}
		// The worker counts the error after its TUN write returns: await it.
		waitFor(t, "no_route and the ICMP error counted", 5*time.Second, func() bool {
			st := a.px.Stats()
			return st.Dropped(DropNoRoute) > 0 && st.ICMPSent > 0
		})
	})
}

// TestBusyPollRelease: a busy-polling proxy ends promptly when its context does and
// leaves no descriptor behind, whether it ran or was closed unrun.
func TestBusyPollRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("TUN devices in a namespace: not a -short test")
	}
	ns := netnstest.New(t, "weft-pxbusy")
	table, err := NewTable(labNetwork, 24)
	if err != nil {
		t.Fatal(err)
	}
	var devs []*tun.Device
	t.Cleanup(func() {
		for _, d := range devs {
			d.Close()
		}
	})
	open := func() *Proxy {
		t.Helper()
		var px *Proxy
		err := ns.Do(func() error {
			d, err := tun.Open(tun.Config{Name: "flannel0", Queues: 2}, zap.NewNop())
			if err != nil {
				return err
			}
			devs = append(devs, d)
			var qs []TUN
			for _, q := range d.Queues() {
				qs = append(qs, q)
			}
			px, err = New(Config{MTU: labMTU, BusyPoll: MaxBusyPoll}, table, qs, zap.NewNop())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return px
	}
	fds := openFDs(t)

	px := open()
	if err := px.Close(); err != nil {
		t.Fatalf("close unrun: %v", err)
	}
	if err := px.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("run after close: %v, want ErrClosed", err)
	}
	devs[0].Close()

	px = open()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- px.Run(ctx) }()
	// The workers spin (the longest window allowed) when the context ends.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("busy-polling proxy still running 5 s after its context ended")
	}
	devs[1].Close()
	if got := openFDs(t); got != fds {
		t.Errorf("%d descriptors open before, %d after", fds, got)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
