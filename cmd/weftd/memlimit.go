package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// memLimitShare is the part of the cgroup's memory limit weftd gives the Go runtime
// as its soft limit; the rest is for what the runtime does not count (stacks it has
// not yet returned, the binary's pages, the kernel's share of the process).
const memLimitShare = 0.9

// setMemoryLimit sets the Go runtime's soft memory limit to memLimitShare of the
// memory limit of weftd's cgroup (a container's limits.memory), unless GOMEMLIMIT is
// set or the cgroup has none. Without it the collector lets the heap double between
// cycles whatever the limit, and a sync of many Nodes can take a container past it.
// root is "/" outside tests.
func setMemoryLimit(env func(string) string, root string, log *zap.Logger) {
	if v := env("GOMEMLIMIT"); v != "" {
		log.Info("Go memory limit from GOMEMLIMIT", zap.String("GOMEMLIMIT", v))
		return
	}
	limit, file := cgroupMemoryLimit(root)
	if limit <= 0 {
		return
	}
	soft := int64(float64(limit) * memLimitShare)
	debug.SetMemoryLimit(soft)
	log.Info("Go memory limit from the cgroup's", zap.String("file", file),
		zap.Int64("cgroup-limit-bytes", limit), zap.Int64("go-limit-bytes", soft))
}

// cgroupMemoryLimit returns the memory limit of our cgroup and the file it is read
// from: memory.max (cgroup v2) or memory.limit_in_bytes (v1), in our own cgroup's
// directory (from /proc/self/cgroup) or, in a container that does not see its
// cgroup's path, at the mount's top. 0 when there is no limit.
func cgroupMemoryLimit(root string) (int64, string) {
	v2, v1 := ownCgroups(filepath.Join(root, "proc/self/cgroup"))
	var files []string
	if v2 != "" {
		files = append(files, filepath.Join(root, "sys/fs/cgroup", v2, "memory.max"))
	}
	files = append(files, filepath.Join(root, "sys/fs/cgroup/memory.max"))
	if v1 != "" {
		files = append(files, filepath.Join(root, "sys/fs/cgroup/memory", v1, "memory.limit_in_bytes"))
	}
	files = append(files, filepath.Join(root, "sys/fs/cgroup/memory/memory.limit_in_bytes"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(data))
		if s == "max" {
			return 0, f
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 { // v1 says "no limit" with a huge number
			return 0, f
		}
		return n, f
	}
	return 0, ""
}

// ownCgroups reads our cgroup v2 path ("0::/path") and v1 memory controller path
// ("N:memory:/path", or a line naming memory among others) from /proc/self/cgroup.
func ownCgroups(file string) (v2, v1 string) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", ""
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			v1 = parts[2]
		}
	}
	return v2, v1
}
