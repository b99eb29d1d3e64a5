package bench

import (
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
	o, err := parsePingStream(out, 20*time.Millisecond, 40*time.Millisecond)
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
	if _, err := parsePingStream("PING x\n", time.Second, 0); err == nil {
		t.Error("no summary: want an error")
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
		o, err := parsePingStream(out, interval, interval)
		if err != nil {
			return
		}
		if o.Received > o.Sent || len(o.Lost) != o.Sent-o.Received {
			t.Fatalf("sent %d, received %d, lost %d", o.Sent, o.Received, len(o.Lost))
		}
	})
}
