package e2e

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/netns"
)

// pingLog is a ping from a pod at a fixed interval, running in the background, with
// the time of every reply (ping -D).
type pingLog struct {
	out     syncBuffer
	done    chan error
	stop    func()
	replies []time.Time
	sent    int
	got     int
}

// startPingLog pings dst from ns every interval until stopped.
func startPingLog(t *testing.T, ns *netns.NS, dst string, interval time.Duration) *pingLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := ns.Command(ctx, "ping", "-n", "-D", "-i", fmt.Sprintf("%.3f", interval.Seconds()), dst)
	p := &pingLog{done: make(chan error, 1)}
	cmd.Stdout = &p.out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) } // ping prints its summary
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			cancel()
			<-p.done
		})
	}
	t.Cleanup(p.stop)
	return p
}

// finish stops the ping and parses its replies and summary.
func (p *pingLog) finish(t *testing.T) {
	t.Helper()
	p.stop()
	p.replies = replyTimes(p.out.String())
	for _, line := range strings.Split(p.out.String(), "\n") {
		if strings.Contains(line, "packets transmitted") {
			fmt.Sscanf(line, "%d packets transmitted, %d received", &p.sent, &p.got)
		}
	}
	if p.sent == 0 {
		t.Fatalf("no ping summary:\n%s", p.out.String())
	}
}

// lost counts the pings that got no reply before the last one that did: a request
// still in flight when the ping was stopped (ping counts it transmitted, not
// received) is not a loss.
func (p *pingLog) lost() int {
	n, _ := pingLoss(p.out.String())
	return n
}

// replyTimes returns the times of the replies in the output of ping -D.
func replyTimes(out string) []time.Time {
	var ts []time.Time
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "[") || !strings.Contains(line, "bytes from") {
			continue
		}
		stamp, _, _ := strings.Cut(line[1:], "]")
		if f, err := strconv.ParseFloat(stamp, 64); err == nil {
			ts = append(ts, time.Unix(0, int64(f*1e9)))
		}
	}
	return ts
}

// repliedSince reports whether a reply came after at (while the ping runs).
func (p *pingLog) repliedSince(at time.Time) bool {
	r := replyTimes(p.out.String())
	return len(r) > 0 && r[len(r)-1].After(at)
}

// firstAfter is the time from at to the first reply after it (-1 when none came).
func (p *pingLog) firstAfter(at time.Time) time.Duration {
	for _, r := range p.replies {
		if r.After(at) {
			return r.Sub(at)
		}
	}
	return -1
}

// maxGap is the longest time between two replies.
func (p *pingLog) maxGap() time.Duration {
	var g time.Duration
	for i := 1; i < len(p.replies); i++ {
		g = max(g, p.replies[i].Sub(p.replies[i-1]))
	}
	return g
}

// TestCrashRecovery: weftd killed with SIGKILL under pod traffic and started again
// at once (as systemd or the kubelet would) keeps its lease, subnet and VtepMAC; on
// vxlan and host-gw the kernel keeps forwarding and no ping is lost; on udp traffic
// stops only while no process holds the TUN and resumes. The time from the restart to
// the first reply, and the longest gap between replies, are logged per backend.
func TestCrashRecovery(t *testing.T) {
	for _, backend := range []string{"udp", "vxlan", "host-gw"} {
		t.Run(backend, func(t *testing.T) { testCrashRecovery(t, backend) })
	}
}

func testCrashRecovery(t *testing.T, backend string) {
	c, hosts, pods := podCluster(t, backend, map[string]string{"a": "lan1", "b": "lan1"})
	meshPing(c, hosts, pods, "a", "b")
	a, b := hosts["a"], hosts["b"]
	leasesBefore := c.leases()
	var mac string
	if backend == "vxlan" {
		mac = vtepMAC(c, a)
	}
	subnet := c.waitSubnetEnv(a).Subnet

	const interval = 5 * time.Millisecond
	p := startPingLog(t, b.pod, pods["a"], interval)
	// Traffic flows before the crash.
	start := time.Now()
	eventually(t, 10*time.Second, func() error {
		if !p.repliedSince(start) {
			return fmt.Errorf("no ping reply yet")
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // a stretch of steady traffic before the kill

	if err := a.daemon.Kill(); err != nil { // SIGKILL, and wait until it is gone
		t.Fatal(err)
	}
	killed := time.Now()
	restart := killed
	c.start(a)
	eventually(t, 20*time.Second, func() error { return healthy(a) })
	ready := time.Since(restart)
	// Traffic after the restart, then the ping ends.
	eventually(t, 20*time.Second, func() error {
		if !p.repliedSince(restart) {
			return fmt.Errorf("no reply after the restart yet")
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	p.finish(t)

	first := p.firstAfter(restart)
	t.Logf("%s: kill -9 and restart: first reply %v after the restart (healthz ready after %v); longest gap between replies %v; %d of %d pings answered (interval %v)",
		backend, first.Round(time.Millisecond), ready.Round(time.Millisecond), p.maxGap().Round(time.Millisecond), p.got, p.sent, interval)
	if first < 0 {
		t.Fatalf("no reply after the restart:\n%s", a.logs())
	}
	if backend != "udp" && p.lost() != 0 {
		t.Fatalf("%s lost %d of %d pings across the crash (the kernel should have kept forwarding); longest gap %v",
			backend, p.lost(), p.sent, p.maxGap())
	}
	if backend == "udp" && p.firstAfter(killed.Add(-interval)) < 0 {
		t.Fatalf("udp: no reply after the kill")
	}

	// Same lease, subnet and VtepMAC; no second lease.
	if got := c.waitSubnetEnv(a).Subnet; got != subnet {
		t.Fatalf("subnet after the restart %v, want %v", got, subnet)
	}
	leasesAfter := c.leases()
	if len(leasesAfter) != len(leasesBefore) {
		t.Fatalf("leases before %v, after %v", leasesBefore, leasesAfter)
	}
	for s, l := range leasesBefore {
		if la, ok := leasesAfter[s]; !ok || la.attrs.PublicIP != l.attrs.PublicIP || string(la.attrs.BackendData) != string(l.attrs.BackendData) {
			t.Fatalf("lease %v before %+v, after %+v", s, l.attrs, la.attrs)
		}
	}
	if backend == "vxlan" {
		if got := vtepMAC(c, a); got != mac {
			t.Fatalf("VtepMAC after the restart %s, want %s", got, mac)
		}
	}
	meshPing(c, hosts, pods, "a", "b")
}
