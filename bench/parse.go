// Package bench measures overlay subjects (weftd's backends, reference kernel
// configurations, other flanneld-compatible daemons) in a lab built by package lab:
// workload runners (iperf3 TCP and 64-byte UDP, ping, daemon CPU), the subject x
// workload matrix, and reports (terminal table, Markdown, JSON, SVG).
package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrParse is wrapped by errors about tool output that cannot be read.
var ErrParse = errors.New("cannot parse tool output")

// TCPResult is an iperf3 TCP stream's outcome as the receiver saw it.
type TCPResult struct {
	Bytes   float64
	Seconds float64
	Gbps    float64
}

// UDPResult is an iperf3 UDP run's outcome.
type UDPResult struct {
	Packets     float64 // sent
	Lost        float64
	Seconds     float64
	PPS         float64 // delivered packets per second
	LossPercent float64
}

type iperfJSON struct {
	Error string `json:"error"`
	End   struct {
		SumReceived *struct {
			Seconds       float64 `json:"seconds"`
			Bytes         float64 `json:"bytes"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
		Sum *struct {
			Seconds     float64 `json:"seconds"`
			Packets     float64 `json:"packets"`
			LostPackets float64 `json:"lost_packets"`
			LostPercent float64 `json:"lost_percent"`
		} `json:"sum"`
	} `json:"end"`
}

func decodeIperf(data []byte) (*iperfJSON, error) {
	var j iperfJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("%w: iperf3 JSON: %w", ErrParse, err)
	}
	if j.Error != "" {
		return nil, fmt.Errorf("%w: iperf3: %s", ErrParse, j.Error)
	}
	return &j, nil
}

// ParseIperfTCP reads `iperf3 -J` output of a TCP client.
func ParseIperfTCP(data []byte) (TCPResult, error) {
	j, err := decodeIperf(data)
	if err != nil {
		return TCPResult{}, err
	}
	s := j.End.SumReceived
	if s == nil || s.Seconds <= 0 {
		return TCPResult{}, fmt.Errorf("%w: iperf3 JSON without end.sum_received", ErrParse)
	}
	return TCPResult{Bytes: s.Bytes, Seconds: s.Seconds, Gbps: s.BitsPerSecond / 1e9}, nil
}

// ParseIperfUDP reads `iperf3 -u -J` output of a UDP client.
func ParseIperfUDP(data []byte) (UDPResult, error) {
	j, err := decodeIperf(data)
	if err != nil {
		return UDPResult{}, err
	}
	s := j.End.Sum
	if s == nil || s.Seconds <= 0 {
		return UDPResult{}, fmt.Errorf("%w: iperf3 JSON without end.sum", ErrParse)
	}
	got := s.Packets - s.LostPackets
	if got < 0 {
		got = 0
	}
	return UDPResult{Packets: s.Packets, Lost: s.LostPackets, Seconds: s.Seconds,
		PPS: got / s.Seconds, LossPercent: s.LostPercent}, nil
}

// ParsePing returns the round-trip time of every reply in ping's output.
func ParsePing(out string) ([]time.Duration, error) {
	var rtts []time.Duration
	for _, line := range strings.Split(out, "\n") {
		i := strings.Index(line, " time=")
		if i < 0 {
			i = strings.Index(line, " time<")
		}
		if i < 0 || !strings.Contains(line, "bytes from") {
			continue
		}
		f := strings.Fields(line[i+6:])
		if len(f) < 2 || f[1] != "ms" {
			return nil, fmt.Errorf("%w: ping line %q", ErrParse, line)
		}
		ms, err := strconv.ParseFloat(f[0], 64)
		if err != nil || ms < 0 || math.IsInf(ms, 0) || math.IsNaN(ms) {
			return nil, fmt.Errorf("%w: ping line %q", ErrParse, line)
		}
		rtts = append(rtts, time.Duration(ms*float64(time.Millisecond)))
	}
	if len(rtts) == 0 {
		return nil, fmt.Errorf("%w: no ping replies", ErrParse)
	}
	return rtts, nil
}

// Percentile returns the p-th percentile (0..100) of v by nearest rank; 0 when v is
// empty. v is not changed.
func Percentile[T ~int64 | ~float64](v []T, p float64) T {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	r := int(math.Ceil(p / 100 * float64(len(s))))
	r = min(max(r, 1), len(s))
	return s[r-1]
}

// Median returns the median of v (the mean of the middle two for even lengths).
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
