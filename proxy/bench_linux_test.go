package proxy

import (
	"context"
	"net/netip"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"testing"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
)

// BenchmarkThroughputVsVXLAN measures, in one run and between the same two
// namespaces, iperf3 TCP throughput and ping RTT over the udp data path and over a
// plain kernel VXLAN, and reports the ratios; once with TUN offloads (weftd's
// default) and once without. Run it with -benchtime=1x; WEFT_BENCH_SECS sets the
// iperf3 duration (default 5), WEFT_BENCH_QUEUES the queues per host (default the
// number of CPUs). The data path runs with Config's defaults (weftd's WEFT_UDP_*
// variables are weftd's; make bench measures those settings through weftd).
func BenchmarkThroughputVsVXLAN(b *testing.B) {
	testenv.NeedTools(b, "ping", "iperf3")
	for _, offload := range []bool{true, false} {
		name := map[bool]string{true: "offload", false: "plain"}[offload]
		b.Run(name, func(b *testing.B) { benchVsVXLAN(b, offload) })
	}
}

func benchVsVXLAN(b *testing.B, offload bool) {
	secs := envInt("WEFT_BENCH_SECS", 5)
	queues := envInt("WEFT_BENCH_QUEUES", min(runtime.NumCPU(), 8))
	l := newLab(b, labOpts{queues: queues, offload: offload})
	a, z := l.hosts[0], l.hosts[1]
	vx := [2]netip.Addr{netip.MustParseAddr("198.18.200.1"), netip.MustParseAddr("198.18.200.2")}
	for i, h := range l.hosts {
		mustRun(b, h.ns, "ip", "link", "add", "vx0", "type", "vxlan", "id", "42", "local", h.under.String(),
			"remote", l.hosts[1-i].under.String(), "dstport", "4789", "dev", "eth0")
		mustRun(b, h.ns, "ip", "addr", "add", vx[i].String()+"/24", "dev", "vx0")
		mustRun(b, h.ns, "ip", "link", "set", "vx0", "up")
	}
	b.ResetTimer()
	for range b.N {
		kern := iperf3(b, a.ns, z.ns, vx[0], vx[1], secs)
		udp := iperf3(b, a.ns, z.ns, labPod[0], labPod[1], secs)
		kernRTT := pingRTT(b, a.ns, vx[0], vx[1])
		udpRTT := pingRTT(b, a.ns, labPod[0], labPod[1])
		b.ReportMetric(kern/1e9, "vxlan-Gbit/s")
		b.ReportMetric(udp/1e9, "udp-Gbit/s")
		b.ReportMetric(udp/kern, "udp/vxlan")
		b.ReportMetric(kernRTT, "vxlan-rtt-ms")
		b.ReportMetric(udpRTT, "udp-rtt-ms")
		b.ReportMetric(udpRTT/kernRTT, "rtt-udp/vxlan")
	}
	b.StopTimer()
	b.Logf("a: %+v", a.px.Stats())
	b.Logf("b: %+v", z.px.Stats())
}

var rttRe = regexp.MustCompile(`time=([0-9.]+) ms`)

// pingRTT returns the median RTT in ms of 40 pings, 20 ms apart.
func pingRTT(t testing.TB, n *netns.NS, src, dst netip.Addr) float64 {
	t.Helper()
	out, err := n.Run(context.Background(), "ping", "-c", "40", "-i", "0.02", "-I", src.String(), dst.String())
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var rtts []float64
	for _, m := range rttRe.FindAllStringSubmatch(out, -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		if err == nil {
			rtts = append(rtts, v)
		}
	}
	if len(rtts) < 20 {
		t.Fatalf("too few replies in ping output: %s", out)
	}
	sort.Float64s(rtts)
	return rtts[len(rtts)/2]
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
