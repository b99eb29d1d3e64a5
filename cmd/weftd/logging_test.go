package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"
)

func TestLogLevel(t *testing.T) {
	tests := []struct {
		v    int
		want zapcore.Level
	}{
		{v: -1, want: zapcore.InfoLevel},
		{v: 0, want: zapcore.InfoLevel},
		{v: 1, want: zapcore.DebugLevel},
		{v: 2, want: zapcore.Level(-2)},
		{v: 10, want: zapcore.Level(-10)},
		{v: 1 << 30, want: zapcore.Level(-128)},
	}
	for _, tt := range tests {
		if got := logLevel(tt.v); got != tt.want {
			t.Errorf("logLevel(%d) = %v, want %v", tt.v, got, tt.want)
		}
	}
}

// TestNewLoggerLevels: -v 0 shows info and not debug; -v 1 and above show debug,
// and a line below debug (V(4)) shows from -v 4 on, named "debug".
func TestNewLoggerLevels(t *testing.T) {
	tests := []struct {
		v    int
		want []string // the levels of the lines written
	}{
		{v: 0, want: []string{"info", "warn"}},
		{v: 1, want: []string{"debug", "info", "warn"}},
		{v: 3, want: []string{"debug", "info", "warn"}},
		{v: 4, want: []string{"debug", "debug", "info", "warn"}},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		log := newLogger(&buf, tt.v)
		log.Log(zapcore.Level(-4), "v4")
		log.Debug("debug")
		log.Info("info")
		log.Warn("warn")
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("-v %d: not JSON: %q", tt.v, line)
			}
			got = append(got, m["level"].(string))
			if _, ok := m["ts"]; !ok {
				t.Errorf("-v %d: no ts in %q", tt.v, line)
			}
		}
		if strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("-v %d: levels %v, want %v", tt.v, got, tt.want)
		}
	}
}
