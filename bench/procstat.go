package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/stat's CPU times (USER_HZ, 100 on every Linux ABI).
const userHZ = 100

// busyCPU is the machine's CPU time spent working, from the "cpu" line of
// /proc/stat: user, nice, system, irq and softirq of every CPU (idle, iowait and
// steal left out). It includes the kernel's packet processing (softirq), which a
// daemon's own CPU time does not: the cost of a kernel data path shows up only here.
func busyCPU() (time.Duration, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("cpu time: %w", err)
	}
	defer f.Close()
	return parseProcStat(f)
}

// parseProcStat reads the busy CPU time of /proc/stat's first ("cpu") line.
func parseProcStat(r io.Reader) (time.Duration, error) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		// cpu user nice system idle iowait irq softirq ...
		if len(f) < 8 {
			return 0, fmt.Errorf("%w: /proc/stat cpu line %q", ErrParse, s.Text())
		}
		var ticks uint64
		for _, i := range []int{1, 2, 3, 6, 7} {
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%w: /proc/stat cpu line %q: %w", ErrParse, s.Text(), err)
			}
			ticks += v
		}
		return time.Duration(ticks) * time.Second / userHZ, nil
	}
	if err := s.Err(); err != nil {
		return 0, fmt.Errorf("cpu time: %w", err)
	}
	return 0, fmt.Errorf("%w: /proc/stat without a cpu line", ErrParse)
}
