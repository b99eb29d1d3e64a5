package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParsePingStream(t *testing.T) {
	out := `PING 198.18.1.2 (198.18.1.2) 56(84) bytes of data.
[100.000] 64 bytes from 198.18.1.2: icmp_seq=1 ttl=62 time=0.1 ms
[100.020] 64 bytes from 198.18.1.2: icmp_seq=2 ttl=62 time=0.1 ms
[100.080] 64 bytes from 198.18.1.2: icmp_seq=5 ttl=62 time=0.1 ms
[100.080] 64 bytes from 198.18.1.2: icmp_seq=5 ttl=62 time=0.1 ms (DUP!)
[100.100] 64 bytes from 198.18.1.2: icmp_seq=6 ttl=62 time=0.1 ms

--- 198.18.1.2 ping statistics ---
8 packets transmitted, 4 received, +1 duplicates, 50% packet loss, time 140ms
`
	o, err := parsePingStream(out, 20*time.Millisecond, 40*time.Millisecond, 100)
	if err != nil {
		t.Fatal(err)
	}
	// seqs 7 and 8 fall in the tail; 3 and 4 are lost, sent at 100.040 and 100.060.
	if o.Sent != 6 || o.Received != 4 || len(o.Lost) != 2 {
		t.Fatalf("%+v", o)
	}
	for i, want := range []float64{100.040, 100.060} {
		if got := float64(o.Lost[i].UnixNano()) / 1e9; got < want-0.001 || got > want+0.001 {
			t.Errorf("lost ping %d sent at %.3f, want %.3f", i, got, want)
		}
	}
	for _, bad := range []string{"PING x\n", "99999999999 packets transmitted\n", "101 packets transmitted\n", "-1 packets transmitted\n"} {
		if _, err := parsePingStream(bad, time.Second, 0, 100); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

// TestParsePingStreamWraps: icmp_seq is 16 bits; a run past 65535 pings goes on
// counting, so a loss after the wrap is one loss, not 65536.
func TestParsePingStreamWraps(t *testing.T) {
	var b strings.Builder
	const sent = 70000
	for k := 1; k <= sent; k++ {
		if k == 68000 {
			continue // the one loss
		}
		fmt.Fprintf(&b, "[%.3f] 64 bytes from x: icmp_seq=%d ttl=62\n", 1000+float64(k)*0.02, k&0xffff)
	}
	fmt.Fprintf(&b, "%d packets transmitted, %d received\n", sent, sent-1)
	o, err := parsePingStream(b.String(), 20*time.Millisecond, 0, sent)
	if err != nil {
		t.Fatal(err)
	}
	if o.Sent != sent || o.Received != sent-1 || len(o.Lost) != 1 {
		t.Fatalf("sent %d, received %d, lost %d", o.Sent, o.Received, len(o.Lost))
	}
	if got := float64(o.Lost[0].UnixNano()) / 1e9; got < 2359.99 || got > 2360.01 {
		t.Errorf("lost ping sent at %.3f, want 2360.000", got)
	}
}

func TestAttribute(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	occ := []occurrence{{"a", ms(0)}, {"b", ms(1000)}, {"c", ms(3000)}}
	// A run from 500 to 1540 ms (crossing event b) and one loss at 2000 ms.
	var lost []time.Time
	for m := 500; m <= 1540; m += 20 {
		lost = append(lost, ms(m))
	}
	lost = append(lost, ms(2000), ms(2960), ms(-200)) // 2960: in flight when c began
	rep := &SoakReport{Events: map[string]*EventScore{}}
	attribute(rep, occ, lost[:len(lost)-1], 20*time.Millisecond)
	attribute(rep, occ, lost[len(lost)-1:], 20*time.Millisecond)
	a, b := rep.Events["a"], rep.Events["b"]
	if a.Count != 1 || a.Lost != 53 || a.MaxRecover != 1560*time.Millisecond {
		t.Errorf("a: %+v", a)
	}
	if b.Count != 1 || b.Lost != 1 || b.MaxRecover != 1020*time.Millisecond {
		t.Errorf("b: %+v", b)
	}
	if c := rep.Events["c"]; c.Count != 1 || c.Lost != 1 || c.MaxRecover != 20*time.Millisecond {
		t.Errorf("c: %+v", c)
	}
	if rep.Events["none"] == nil || rep.Events["none"].Lost != 1 {
		t.Errorf("none: %+v", rep.Events["none"])
	}
}

// FuzzParsePingStream: any output parses without panic into consistent counts.
func FuzzParsePingStream(f *testing.F) {
	f.Add("[1.0] 64 bytes from x: icmp_seq=1 ttl=1\n[1.1] 64 bytes from x: icmp_seq=3 ttl=1\n5 packets transmitted, 2 received\n", int64(20))
	f.Add("[9e99] 64 bytes from x: icmp_seq=-4 \n-1 packets transmitted\n", int64(0))
	f.Fuzz(func(t *testing.T, out string, intervalMS int64) {
		interval := time.Duration(max(intervalMS, 1)%1000+1) * time.Millisecond
		o, err := parsePingStream(out, interval, interval, 1<<16)
		if err != nil {
			return
		}
		if o.Received > o.Sent || len(o.Lost) != o.Sent-o.Received {
			t.Fatalf("sent %d, received %d, lost %d", o.Sent, o.Received, len(o.Lost))
		}
	})
}
