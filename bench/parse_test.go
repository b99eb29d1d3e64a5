package bench

import (
	"errors"
	"math"
	"os"
	"testing"
	"time"
)

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestParseIperfTCP(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    []byte
		gbps    float64
		bytes   float64
		wantErr bool
	}{
		{"real", readFile(t, "iperf-tcp.json"), 9.964612346794827, 1245839360, false},
		{"refused", readFile(t, "iperf-error.json"), 0, 0, true},
		{"no end", []byte(`{"end":{}}`), 0, 0, true},
		{"zero seconds", []byte(`{"end":{"sum_received":{"seconds":0,"bytes":1,"bits_per_second":1}}}`), 0, 0, true},
		{"garbage", []byte("iperf3: error"), 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseIperfTCP(tc.data)
			if tc.wantErr {
				if !errors.Is(err, ErrParse) {
					t.Fatalf("err %v, want ErrParse", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !near(r.Gbps, tc.gbps) || r.Bytes != tc.bytes {
				t.Errorf("got %+v, want %v Gbit/s and %v bytes", r, tc.gbps, tc.bytes)
			}
		})
	}
}

func TestParseIperfUDP(t *testing.T) {
	r, err := ParseIperfUDP(readFile(t, "iperf-udp.json"))
	if err != nil {
		t.Fatal(err)
	}
	// 135220 sent, 85167 lost in 1.003159 s.
	if r.Packets != 135220 || r.Lost != 85167 || !near(r.PPS, (135220-85167)/1.003159) || !near(r.LossPercent, 62.98402603165212) {
		t.Errorf("got %+v", r)
	}
	if _, err := ParseIperfUDP(readFile(t, "iperf-error.json")); !errors.Is(err, ErrParse) {
		t.Errorf("error JSON: %v", err)
	}
	// More lost than sent (iperf3 counts out-of-order packets oddly) is no negative rate.
	r, err = ParseIperfUDP([]byte(`{"end":{"sum":{"seconds":2,"packets":10,"lost_packets":12}}}`))
	if err != nil || r.PPS != 0 {
		t.Errorf("lost > sent: %+v, %v", r, err)
	}
}

func TestParsePing(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	for _, tc := range []struct {
		name    string
		out     string
		want    []time.Duration
		wantErr bool
	}{
		{"real", string(readFile(t, "ping.txt")), []time.Duration{ms(0.032), ms(0.034), ms(0.057), ms(0.061), ms(0.034)}, false},
		{"less than", "64 bytes from 198.18.2.2: icmp_seq=1 ttl=63 time<1 ms\n", []time.Duration{ms(1)}, false},
		{"slow", "64 bytes from 198.18.2.2: icmp_seq=1 ttl=63 time=1234 ms\n", []time.Duration{ms(1234)}, false},
		{"no replies", "PING 198.18.2.2 56(84) bytes of data.\n\n--- statistics ---\n3 packets transmitted, 0 received\n", nil, true},
		{"bad number", "64 bytes from 198.18.2.2: icmp_seq=1 ttl=63 time=abc ms\n", nil, true},
		{"bad unit", "64 bytes from 198.18.2.2: icmp_seq=1 ttl=63 time=0.1 s\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePing(tc.out)
			if tc.wantErr {
				if !errors.Is(err, ErrParse) {
					t.Fatalf("err %v, want ErrParse", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if d := got[i] - tc.want[i]; d < -time.Nanosecond || d > time.Nanosecond {
					t.Errorf("rtt %d: %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestPercentileMedian(t *testing.T) {
	v := make([]float64, 100)
	for i := range v {
		v[i] = float64(100 - i) // 100..1, unsorted
	}
	for _, tc := range []struct {
		p, want float64
	}{{50, 50}, {99, 99}, {100, 100}, {0, 1}, {1, 1}} {
		if got := Percentile(v, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if v[0] != 100 {
		t.Error("Percentile sorted its input")
	}
	for _, tc := range []struct {
		v    []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(tc.v); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}
	if got := Percentile([]time.Duration{3, 1, 2}, 50); got != 2 {
		t.Errorf("duration p50 = %v", got)
	}
}

func FuzzParsePing(f *testing.F) {
	f.Add("64 bytes from 198.18.2.2: icmp_seq=1 ttl=63 time=0.045 ms\n")
	f.Add("64 bytes from x: time<1 ms")
	f.Add("bytes from time= ms")
	f.Fuzz(func(t *testing.T, s string) {
		rtts, err := ParsePing(s)
		if err == nil && len(rtts) == 0 {
			t.Fatal("no error and no replies")
		}
		for _, r := range rtts {
			if r < 0 {
				t.Fatalf("negative rtt %v", r)
			}
		}
	})
}

func FuzzParseIperf(f *testing.F) {
	for _, n := range []string{"iperf-tcp.json", "iperf-udp.json", "iperf-error.json"} {
		data, err := os.ReadFile("testdata/" + n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if r, err := ParseIperfTCP(data); err == nil && r.Seconds <= 0 {
			t.Fatalf("tcp: accepted %+v", r)
		}
		if r, err := ParseIperfUDP(data); err == nil && (r.Seconds <= 0 || r.PPS < 0) {
			t.Fatalf("udp: accepted %+v", r)
		}
	})
}
