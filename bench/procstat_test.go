package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     time.Duration
		err      bool
	}{
		// user nice system idle iowait irq softirq steal: 100+2+50+7+11 busy ticks
		{"busy", "cpu  100 2 50 9999 30 7 11 5 0 0\ncpu0 50 1 25 5000 15 3 5 2 0 0\n", 1700 * time.Millisecond, false},
		{"cpu line not first", "intr 1 2\ncpu  1 0 0 0 0 0 0\n", 10 * time.Millisecond, false},
		{"short line", "cpu  1 2 3\n", 0, true},
		{"not a number", "cpu  1 x 3 4 5 6 7\n", 0, true},
		{"no cpu line", "cpu0 1 2 3 4 5 6 7\n", 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseProcStat(strings.NewReader(c.in))
			if c.err {
				if !errors.Is(err, ErrParse) {
					t.Fatalf("got %v, %v; want an ErrParse", got, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestBusyCPU(t *testing.T) {
	a, err := busyCPU()
	if err != nil {
		t.Fatal(err)
	}
	b, err := busyCPU()
	if err != nil || b < a || a <= 0 {
		t.Fatalf("busy CPU %v then %v (%v): want positive and not falling", a, b, err)
	}
}
