package paths

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/netnstest"
	"github.com/weftnet/weft/encap"
)

// staticPaths is a backend's list of paths that never changes.
type staticPaths []encap.Path

func (s staticPaths) Paths() []encap.Path { return s }

// probeLab is two namespaces on a veth pair: "a" probes from 198.18.1.0 (on lo),
// "r" (192.0.2.2) answers every echo to 198.18.128.0/17 (a local route: AnyIP).
// 198.18.0.0/17 is routed from a via 192.0.2.3, which nobody holds: probes there wait
// for ARP and are dropped, as probes to hosts that are gone.
func probeLab(b *testing.B) *netns.NS {
	a, r := netnstest.New(b, "wpa"), netnstest.New(b, "wpr")
	if err := netns.Veth(a, "veth0", r, "veth0"); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		ns   *netns.NS
		args []string
	}{
		{a, []string{"addr", "add", "192.0.2.1/24", "dev", "veth0"}},
		{a, []string{"addr", "add", "198.18.1.0/32", "dev", "lo"}},
		{a, []string{"link", "set", "lo", "up"}},
		{a, []string{"route", "add", "198.18.128.0/17", "via", "192.0.2.2", "src", "198.18.1.0"}},
		{a, []string{"route", "add", "198.18.0.0/17", "via", "192.0.2.3", "src", "198.18.1.0"}},
		{r, []string{"addr", "add", "192.0.2.2/24", "dev", "veth0"}},
		{r, []string{"link", "set", "lo", "up"}},
		{r, []string{"route", "add", "local", "198.18.128.0/17", "dev", "lo"}},
		{r, []string{"route", "add", "198.18.1.0/32", "via", "192.0.2.1"}},
	} {
		if out, err := c.ns.Run(ctx, "ip", c.args...); err != nil {
			b.Fatalf("ip %v in %s: %v: %s", c.args, c.ns.Name, err, out)
		}
	}
	return a
}

// benchPaths are n peers with /30 subnets from base: tunneled from 198.18.1.0 to
// each subnet's first address, MTU 1500, the underlay address pub(i). (The "tunnel"
// is the routes of probeLab: the Prober sees a vxlan backend's paths, the kernel
// carries the probes without encapsulation.)
func benchPaths(n int, base netip.Addr, pub func(int) netip.Addr) staticPaths {
	out := make(staticPaths, n)
	a := base.As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	for i := range out {
		w := v + uint32(i)*4
		ov := netip.AddrFrom4([4]byte{byte(w >> 24), byte(w >> 16), byte(w >> 8), byte(w)})
		out[i] = encap.Path{Backend: "vxlan", Subnet: netip.PrefixFrom(ov, 30), PublicIP: pub(i),
			Overlay: ov, Local: netip.MustParseAddr("198.18.1.0"), MTU: 1500,
			Endpoint: netip.AddrPortFrom(pub(i), 8472), Proto: "UDP 8472"}
	}
	return out
}

// cpuTime is this process's user and system CPU so far.
func cpuTime(b *testing.B) (user, sys time.Duration) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// BenchmarkProber5000 runs a Prober at its defaults (rate 250 packets/s) over 5,000
// peers in real namespaces: "answering", every peer answers through the path;
// "silent", none does and its underlay address waits for ARP (as in weft-bench
// scale, whose simulated hosts never answer). One op is one second of Run, after a
// first round to every peer. Reported: the process's user and system CPU in % of one
// core (system CPU includes the kernel's work for the answers: on the veth pair the
// answering namespace's is done in ours, so "answering" overstates it), probe
// packets asked for per second (Sent), rounds whose probe left (sendmsg did not
// fail) per second, the longest time a peer went without such a round, and how
// many peers had none within 60 s at some point.
func BenchmarkProber5000(b *testing.B) {
	const n = 5000
	for _, tc := range []struct {
		name string
		base netip.Addr
	}{
		{"answering", netip.MustParseAddr("198.18.128.0")},
		{"silent", netip.MustParseAddr("198.18.2.0")}, // to 198.18.80.0: under /17
	} {
		b.Run(tc.name, func(b *testing.B) {
			a := probeLab(b)
			paths := benchPaths(n, tc.base, func(i int) netip.Addr {
				if tc.name == "answering" {
					return netip.MustParseAddr("192.0.2.2")
				}
				return netip.AddrFrom4([4]byte{192, 0, 2, byte(100 + i%155)})
			})
			benchProber(b, a, paths)
		})
	}
}

// probeSeen follows when each peer last had a round whose probe left.
type probeSeen struct {
	round   map[*peer]uint16
	last    map[*peer]time.Time
	maxGap  time.Duration
	late    map[*peer]bool // went 60 s without a round (or had none)
	rounds  int
	counted bool // rounds are counted (after the first round to every peer)
}

// sample looks at every peer once: a round seen since the last sample is counted
// when its probes left; peers with none for longer than the gap so far raise it.
func (s *probeSeen) sample(pr *Prober, now time.Time) (all bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	all = len(pr.peers) > 0
	for _, p := range pr.peers {
		if p.round != s.round[p] && p.sendErr == nil && !p.sent.IsZero() {
			s.round[p] = p.round
			if t, ok := s.last[p]; ok && s.counted {
				s.maxGap = max(s.maxGap, p.sent.Sub(t))
				s.rounds++
			}
			s.last[p] = p.sent
		}
		t, ok := s.last[p]
		if !ok {
			all = false
			if s.counted {
				s.late[p] = true
			}
			continue
		}
		if s.counted {
			s.maxGap = max(s.maxGap, now.Sub(t))
			if now.Sub(t) > time.Minute {
				s.late[p] = true
			}
		}
	}
	return all
}

func benchProber(b *testing.B, a *netns.NS, paths staticPaths) {
	pr := New(Config{}, paths, zap.NewNop())
	// The socket is opened in a's namespace; Run then runs on any thread, as in weftd.
	var wg sync.WaitGroup
	if err := a.Do(func() error {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		pr.openSocket(0, &wg)
		return pr.sockErr[0]
	}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pr.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
		wg.Wait()
	}()
	s := &probeSeen{round: map[*peer]uint16{}, last: map[*peer]time.Time{}, late: map[*peer]bool{}}
	// Warm up: every peer has had a round that left, or 2 minutes passed (then the
	// peers still without one count as over 60 s).
	for deadline := time.Now().Add(2 * time.Minute); !s.sample(pr, time.Now()) && time.Now().Before(deadline); {
		time.Sleep(time.Second)
	}
	s.counted = true
	b.ResetTimer()
	user0, sys0 := cpuTime(b)
	sent0, t0 := pr.Sent(), time.Now()
	for range b.N {
		time.Sleep(time.Second)
		s.sample(pr, time.Now())
	}
	wall := time.Since(t0)
	b.StopTimer()
	user1, sys1 := cpuTime(b)
	b.ReportMetric(100*float64(user1-user0)/float64(wall), "user-cpu-%")
	b.ReportMetric(100*float64(sys1-sys0)/float64(wall), "sys-cpu-%")
	b.ReportMetric(float64(pr.Sent()-sent0)/wall.Seconds(), "pkts/s")
	b.ReportMetric(float64(s.rounds)/wall.Seconds(), "rounds-left/s")
	b.ReportMetric(s.maxGap.Seconds(), "max-gap-s")
	b.ReportMetric(float64(len(s.late)), "peers-over-60s")
	states, detail := map[string]int{}, map[string]string{}
	for _, p := range pr.Report().Peers {
		k := p.State + "/" + p.Reason
		states[k]++
		detail[k] = p.Detail
	}
	b.Log(fmt.Sprint("states: ", states))
	for k, d := range detail {
		if d != "" {
			b.Logf("%s, e.g.: %s", k, d)
		}
	}
}
