package proxy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestConfigBounds(t *testing.T) {
	for _, c := range []struct {
		name    string
		cfg     Config
		errName string // field the error must name; "" for a valid config
	}{
		{name: "defaults", cfg: Config{MTU: 1472}},
		{name: "every bound reached", cfg: Config{Port: 65535, MTU: MaxMTU, Tuning: Tuning{Batch: MaxBatch}, BusyPoll: MaxBusyPoll}},
		{name: "lowest", cfg: Config{Port: 1, MTU: MinMTU, Tuning: Tuning{Batch: 1}}},
		{name: "no MTU", cfg: Config{}, errName: "MTU"},
		{name: "MTU too small", cfg: Config{MTU: MinMTU - 1}, errName: "MTU"},
		{name: "MTU too large", cfg: Config{MTU: MaxMTU + 1}, errName: "MTU"},
		{name: "negative port", cfg: Config{Port: -1, MTU: 1472}, errName: "Port"},
		{name: "port too large", cfg: Config{Port: 65536, MTU: 1472}, errName: "Port"},
		{name: "batch too large", cfg: Config{MTU: 1472, Tuning: Tuning{Batch: MaxBatch + 1}}, errName: "Batch"},
		{name: "negative batch", cfg: Config{MTU: 1472, Tuning: Tuning{Batch: -1}}, errName: "Batch"},
		{name: "busy poll too long", cfg: Config{MTU: 1472, BusyPoll: MaxBusyPoll + time.Nanosecond}, errName: "BusyPoll"},
		{name: "negative busy poll", cfg: Config{MTU: 1472, BusyPoll: -time.Microsecond}, errName: "BusyPoll"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.cfg.withDefaults()
			if c.errName == "" {
				if err != nil || got.Port == 0 || got.Batch == 0 || got.SocketBuffer == 0 {
					t.Fatalf("got %+v, %v; want a valid config with defaults filled in", got, err)
				}
				return
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.errName) {
				t.Fatalf("error %v, want ErrConfig naming %s", err, c.errName)
			}
			// New applies the same bounds before it opens anything.
			if _, err := New(c.cfg, nil, []TUN{nil}, zap.NewNop()); !errors.Is(err, ErrConfig) {
				t.Fatalf("New: error %v, want ErrConfig", err)
			}
		})
	}
}
