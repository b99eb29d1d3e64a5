package proxy

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/testenv"
)

// TestIdleCPU: after traffic, the data path goes back to sleep. Over 30 s without
// traffic this process (both lab hosts' data paths and the test itself) uses at most
// 5% of a core; the aim is under 1%, the bound is generous for a loaded machine. The
// CPU time is the process's user+system time from /proc/self/stat: no wall-clock
// speed is asserted.
func TestIdleCPU(t *testing.T) {
	testenv.NeedTools(t, "ping")
	l := newLab(t, labOpts{queues: 2, offload: true})
	ctx := context.Background()
	// Traffic first, both ways, so every worker has run.
	for i, h := range l.hosts {
		out, err := h.ns.Run(ctx, "ping", "-c", "50", "-i", "0.002", "-W", "2", "-I", labPod[i].String(), labPod[1-i].String())
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	time.Sleep(time.Second)
	const idle = 30 * time.Second
	before, start := processCPU(t), time.Now()
	time.Sleep(idle)
	used, elapsed := processCPU(t)-before, time.Since(start)
	share := float64(used) / float64(elapsed)
	t.Logf("idle for %v: %v of CPU (%.2f%% of a core)", elapsed.Round(time.Millisecond), used, 100*share)
	if share > 0.05 {
		t.Errorf("idle data paths used %.1f%% of a core over %v, want under 5%%", 100*share, elapsed.Round(time.Second))
	}
}

// processCPU is this process's user+system time, from /proc/self/stat.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	// After the command, which is in parentheses and may hold spaces: field 3
	// (state) first, utime is field 14 and stime 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		t.Fatalf("/proc/self/stat: %q", b)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("/proc/self/stat: %q", b)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ: 100 on Linux
}
