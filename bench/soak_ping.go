package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/weftnet/weft/bench/netns"
)

// pingStream is one ping from a pod at a fixed interval for the length of a soak,
// its output (ping -D) kept to find which pings were lost and when.
type pingStream struct {
	from, to string // host names
	interval time.Duration
	out      lockedBuffer
	done     chan error
	cancel   context.CancelFunc
	once     sync.Once
}

// lockedBuffer is written by the ping's output copier and read by the soak.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startPingStream(ns *netns.NS, from, to string, addr netip.Addr, interval time.Duration) (*pingStream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pingStream{from: from, to: to, interval: interval, done: make(chan error, 1), cancel: cancel}
	cmd := ns.Command(ctx, "ping", "-n", "-D", "-i", strconv.FormatFloat(interval.Seconds(), 'f', -1, 64), addr.String())
	cmd.Stdout = &p.out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) } // ping ends with its summary
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("ping %s -> %s: %w", from, to, err)
	}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// stop ends the ping (its summary printed); safe to call more than once.
func (p *pingStream) stop() {
	p.once.Do(func() {
		p.cancel()
		<-p.done
	})
}

// pingOutcome is what a stopped ping stream saw: when each lost ping was sent (by
// interpolation between the replies around it) and the counts.
type pingOutcome struct {
	Sent, Received int
	Lost           []time.Time
}

// parsePingStream reads the output of ping -D: the reply lines' sequence numbers and
// times, and the summary's transmitted count. Pings of the last tail before the end
// are not counted (their replies may still have been on the way). A summary above
// maxSent (more pings than the run could send) is an error, not an allocation.
// ping's icmp_seq is 16 bits and wraps after 65535 (22 minutes at 20 ms): the
// replies, printed in order, are unwrapped.
func parsePingStream(out string, interval, tail time.Duration, maxSent int) (pingOutcome, error) {
	replies, sent, err := scanPingStream(out, maxSent)
	if err != nil {
		return pingOutcome{}, err
	}
	sort.Slice(replies, func(i, j int) bool { return replies[i].seq < replies[j].seq })
	last := sent - int(tail/interval)
	o := pingOutcome{}
	got := map[int]bool{}
	for _, r := range replies {
		if r.seq <= last {
			got[r.seq] = true
		}
	}
	if len(replies) == 0 { // nothing to time the losses by: they go before every event
		o.Sent = max(last, 0)
		o.Lost = make([]time.Time, o.Sent)
		return o, nil
	}
	for k := 1; k <= last; k++ {
		o.Sent++
		if got[k] {
			o.Received++
			continue
		}
		o.Lost = append(o.Lost, sendTime(replies, k, interval))
	}
	return o, nil
}

// pingReply is a reply's sequence number (counting on over 65535) and its time.
type pingReply struct {
	seq int
	at  time.Time
}

// scanPingStream reads ping's replies (DUP! left out) and its summary's transmitted
// count, which must be within 0..maxSent.
func scanPingStream(out string, maxSent int) (replies []pingReply, sent int, err error) {
	sent = -1
	wraps, prev := 0, -1
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if n, _, ok := strings.Cut(line, " packets transmitted"); ok {
			v, err := strconv.Atoi(strings.TrimSpace(n))
			if err != nil {
				return nil, 0, fmt.Errorf("ping summary %q: %w", line, err)
			}
			if v < 0 || v > maxSent {
				return nil, 0, fmt.Errorf("ping summary %q: %d transmitted, want 0..%d", line, v, maxSent)
			}
			sent = v
			continue
		}
		if !strings.HasPrefix(line, "[") || !strings.Contains(line, " bytes from ") || strings.Contains(line, "DUP!") {
			continue
		}
		stamp, rest, _ := strings.Cut(line[1:], "]")
		_, seqText, ok := strings.Cut(rest, "icmp_seq=")
		if !ok {
			continue
		}
		seqText, _, _ = strings.Cut(seqText, " ")
		f, err1 := strconv.ParseFloat(stamp, 64)
		seq, err2 := strconv.Atoi(seqText)
		if err1 != nil || err2 != nil || seq < 0 || seq > 0xffff {
			continue
		}
		if prev >= 0 && seq < prev-0x8000 { // 65535 -> 0
			wraps++
		}
		prev = seq
		replies = append(replies, pingReply{seq + wraps<<16, time.Unix(0, int64(f*1e9))})
	}
	if sent < 0 {
		return nil, 0, fmt.Errorf("no ping summary in %d bytes of output", len(out))
	}
	return replies, sent, nil
}

// sendTime is the send time of seq k: between the replies (sorted, at least one)
// around it, or extrapolated by interval.
func sendTime(replies []pingReply, k int, interval time.Duration) time.Time {
	hi := sort.Search(len(replies), func(i int) bool { return replies[i].seq > k })
	lo := hi - 1
	if hi == len(replies) {
		hi = -1
	}
	switch {
	case lo >= 0 && hi >= 0:
		a, b := replies[lo], replies[hi]
		frac := float64(k-a.seq) / float64(b.seq-a.seq)
		return a.at.Add(time.Duration(frac * float64(b.at.Sub(a.at))))
	case lo >= 0:
		return replies[lo].at.Add(time.Duration(k-replies[lo].seq) * interval)
	default:
		return replies[hi].at.Add(-time.Duration(replies[hi].seq-k) * interval)
	}
}
