package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// record fills in what names a run: the commit of the tree it ran from, the weftd
// build measured, and the machine (CPU model, cores, kernel, load average at the start).
func (r *Report) record(weftd string) {
	r.Commit = commit()
	r.CPUs = runtime.NumCPU()
	r.Kernel = kernel()
	r.CPUModel = cpuModel()
	r.LoadAvg = loadAvg()
	if weftd != "" {
		r.Weftd = version(weftd)
	}
}

// commit is `git describe --always --dirty` of the working directory's tree (what
// `make bench` runs from), else the VCS revision this binary was built from.
func commit() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty", "--tags").Output()
	if err == nil && len(strings.TrimSpace(string(out))) > 0 {
		return strings.TrimSpace(string(out))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && len(s.Value) >= 7:
				rev = s.Value[:7]
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "-dirty"
			}
		}
		if rev != "" {
			return rev + dirty + " (weft-bench's build)"
		}
	}
	return ""
}

// version is the first line of `weftd --version`.
func version(weftd string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, weftd, "--version").Output()
	if err != nil {
		return ""
	}
	return firstLine(strings.TrimSpace(string(out)))
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	return parseCPUModel(f)
}

func parseCPUModel(f io.Reader) string {
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// loadAvg is the 1, 5 and 15 minute load averages of /proc/loadavg.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// Machine describes the run's machine and build in one line: "2026-11-28 08:30 UTC,
// commit ce352c2-dirty, AMD EPYC 7B13, 2 CPUs, Linux 6.18.44, load 1.02 0.80 0.50".
func (r *Report) Machine() string {
	var p []string
	if !r.Started.IsZero() {
		p = append(p, r.Started.UTC().Format("2006-01-02 15:04 UTC"))
	}
	if r.Commit != "" {
		p = append(p, "commit "+r.Commit)
	}
	if r.Weftd != "" {
		p = append(p, "measured "+r.Weftd)
	}
	if r.CPUModel != "" {
		p = append(p, r.CPUModel)
	}
	if r.CPUs > 0 {
		p = append(p, fmt.Sprintf("%d CPUs", r.CPUs))
	}
	if r.Kernel != "" {
		p = append(p, "Linux "+r.Kernel)
	}
	if r.LoadAvg != "" {
		p = append(p, "load average "+r.LoadAvg+" at the start")
	}
	if r.IdleS > 0 {
		p = append(p, fmt.Sprintf("idle window %gs", r.IdleS))
	}
	return strings.Join(p, ", ")
}
