package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/netns"
)

// Path is where a workload runs: from Client to Addr, which lives in Server.
type Path struct {
	Client, Server *netns.NS
	Addr           netip.Addr
	// Daemons whose CPU time is charged to the traffic (may be empty).
	Daemons []*lab.Daemon
}

const iperfPort = "5201"

// iperf runs one iperf3 client against a one-off server in p.Server, both bounded
// in time, and returns the client's JSON. A server that is not listening yet is
// retried until the deadline.
func iperf(ctx context.Context, p Path, dur time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, dur+20*time.Second)
	defer cancel()
	srv := p.Server.Command(ctx, "iperf3", "-s", "-1", "-B", p.Addr.String(), "-p", iperfPort)
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("iperf3 server: %w", err)
	}
	defer func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
	}()
	secs := strconv.FormatFloat(dur.Seconds(), 'f', -1, 64)
	cargs := append([]string{"-c", p.Addr.String(), "-p", iperfPort, "-J", "-t", secs}, args...)
	deadline := time.Now().Add(5 * time.Second)
	for {
		cli := p.Client.Command(ctx, "iperf3", cargs...)
		out, err := cli.Output()
		// iperf3 -J may exit 0 with an error in its JSON.
		refused := bytes.Contains(out, []byte("Connection refused"))
		if err == nil && !refused {
			return out, nil
		}
		if !refused || time.Now().After(deadline) || ctx.Err() != nil {
			if err == nil {
				return out, nil // the parser reports the JSON error
			}
			msg := strings.TrimSpace(string(out))
			if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
				msg += " " + strings.TrimSpace(string(ee.Stderr))
			}
			if len(msg) > 400 {
				msg = msg[:400]
			}
			return nil, fmt.Errorf("iperf3 to %s: %w: %s", p.Addr, err, msg)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TCPCost is what a TCP run cost per GB received: the daemons' CPU seconds (0
// without daemons) and the whole machine's busy CPU seconds (busyCPU: user, system,
// irq and softirq of every CPU, so kernel data paths are charged too). The machine
// figure includes iperf3 itself and anything else running at the time.
type TCPCost struct {
	DaemonPerGB, TotalPerGB float64
}

// TCP runs iperf3 TCP for dur with streams parallel streams (iperf3 -P; 1 or less:
// one stream) and reports what it cost.
func TCP(ctx context.Context, p Path, dur time.Duration, streams int) (TCPResult, TCPCost, error) {
	var args []string
	if streams > 1 {
		args = []string{"-P", strconv.Itoa(streams)}
	}
	before, err := cpu(p.Daemons)
	if err != nil {
		return TCPResult{}, TCPCost{}, err
	}
	busyBefore, err := busyCPU()
	if err != nil {
		return TCPResult{}, TCPCost{}, err
	}
	out, err := iperf(ctx, p, dur, args...)
	if err != nil {
		return TCPResult{}, TCPCost{}, err
	}
	busyAfter, err := busyCPU()
	if err != nil {
		return TCPResult{}, TCPCost{}, err
	}
	after, err := cpu(p.Daemons)
	if err != nil {
		return TCPResult{}, TCPCost{}, err
	}
	r, err := ParseIperfTCP(out)
	if err != nil {
		return r, TCPCost{}, err
	}
	return r, TCPCost{DaemonPerGB: CPUPerGB(after-before, r.Bytes), TotalPerGB: CPUPerGB(busyAfter-busyBefore, r.Bytes)}, nil
}

// CPUPerGB is CPU seconds per 10^9 bytes; 0 when nothing moved.
func CPUPerGB(cpu time.Duration, bytes float64) float64 {
	if bytes <= 0 {
		return 0
	}
	return cpu.Seconds() / (bytes / 1e9)
}

func cpu(ds []*lab.Daemon) (time.Duration, error) {
	var sum time.Duration
	for _, d := range ds {
		c, err := d.CPUTime()
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

// UDP64 sends 64-byte UDP payloads as fast as iperf3 can for dur.
func UDP64(ctx context.Context, p Path, dur time.Duration) (UDPResult, error) {
	out, err := iperf(ctx, p, dur, "-u", "-b", "0", "-l", "64")
	if err != nil {
		return UDPResult{}, err
	}
	return ParseIperfUDP(out)
}

// PingResult is the RTT summary of a ping run.
type PingResult struct {
	Sent, Received int
	Median, P99    time.Duration
}

// Ping sends count pings at interval (10 ms and below need root) and summarises
// every reply's RTT.
func Ping(ctx context.Context, p Path, count int, interval time.Duration) (PingResult, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(count)*interval+10*time.Second)
	defer cancel()
	out, err := p.Client.Command(ctx, "ping", "-n", "-c", strconv.Itoa(count),
		"-i", strconv.FormatFloat(interval.Seconds(), 'f', -1, 64), "-W", "1", p.Addr.String()).CombinedOutput()
	rtts, perr := ParsePing(string(out))
	if perr != nil {
		if err != nil {
			return PingResult{}, fmt.Errorf("ping %s: %w: %w", p.Addr, err, perr)
		}
		return PingResult{}, perr
	}
	return PingResult{Sent: count, Received: len(rtts),
		Median: Percentile(rtts, 50), P99: Percentile(rtts, 99)}, nil
}

// WaitPing pings addr from ns until a reply comes or timeout passes.
func WaitPing(ctx context.Context, ns *netns.NS, addr netip.Addr, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		out, err := ns.Run(ctx, "ping", "-n", "-c1", "-W1", addr.String())
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("no ping reply from %s within %s: %w: %s", addr, timeout, err, strings.TrimSpace(out))
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
