package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/weftnet/weft/bench/lab"
)

// poll calls f every interval until it is done or fails, for at most timeout.
func poll(ctx context.Context, timeout, every time.Duration, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := f()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// cpuOver returns pid's CPU use over d in percent of one core.
func cpuOver(ctx context.Context, pid int, d time.Duration) (float64, error) {
	c0, err := lab.ProcCPU(pid)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	c1, err := lab.ProcCPU(pid)
	if err != nil {
		return 0, err
	}
	return 100 * (c1 - c0).Seconds() / time.Since(t0).Seconds(), nil
}

// cpuUntilIdle samples pid's CPU every second for the Idle window from back: the
// CPU over the window, and the start of the first second at idle (at most twice the
// idle CPU or one point above it; -1 if none).
func (r *scaleRun) cpuUntilIdle(ctx context.Context, pid int, back time.Time, idle float64) (pct, settleS float64, err error) {
	c0, err := lab.ProcCPU(pid)
	if err != nil {
		return 0, -1, err
	}
	t0 := time.Now()
	settleS = -1
	prev := c0
	for time.Since(back) < r.o.Idle {
		select {
		case <-ctx.Done():
			return 0, -1, ctx.Err()
		case <-time.After(time.Second):
		}
		c, err := lab.ProcCPU(pid)
		if err != nil {
			return 0, -1, err
		}
		if p := 100 * (c - prev).Seconds(); settleS < 0 && p <= max(2*idle, idle+1) {
			settleS = time.Since(back).Seconds() - 1
		}
		prev = c
	}
	return 100 * (prev - c0).Seconds() / time.Since(t0).Seconds(), settleS, nil
}

// rssMiB reads VmRSS from /proc/<pid>/status.
func rssMiB(pid int) (float64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("rss: %w", err)
	}
	return ParseVmRSS(string(data))
}

// ErrNoVmRSS is returned for a /proc/<pid>/status without a VmRSS line.
var ErrNoVmRSS = errors.New("no VmRSS line")

// ParseVmRSS returns the VmRSS of a /proc/<pid>/status text in MiB.
func ParseVmRSS(status string) (float64, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("%w: %q", ErrNoVmRSS, line)
			}
			kb, err := strconv.ParseUint(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%w: %w", ErrNoVmRSS, err)
			}
			return float64(kb) / 1024, nil
		}
	}
	return 0, ErrNoVmRSS
}
