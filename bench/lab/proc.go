package lab

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcCPU reads utime+stime of pid from /proc/<pid>/stat.
func ProcCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("cpu time: %w", err)
	}
	return ParseProcStatCPU(string(data), 100)
}

// ErrProcStat is wrapped by errors about an unreadable /proc/<pid>/stat line.
var ErrProcStat = errors.New("bad /proc stat line")

// ParseProcStatCPU returns utime+stime of a /proc/<pid>/stat line; hz is the clock
// tick rate (USER_HZ, 100 on Linux).
func ParseProcStatCPU(line string, hz int) (time.Duration, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: no ')'", ErrProcStat)
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("%w: %d fields", ErrProcStat, len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrProcStat, err)
	}
	// The sum, in nanoseconds, must fit a Duration: 2^63 ns is 292 years of CPU.
	const maxTicks = math.MaxInt64 / uint64(time.Second)
	if u > maxTicks || s > maxTicks-u || hz <= 0 {
		return 0, fmt.Errorf("%w: cpu ticks %d+%d at %d Hz", ErrProcStat, u, s, hz)
	}
	return time.Duration(u+s) * time.Second / time.Duration(hz), nil
}
