package main

import (
	"errors"
	"io"
	"math"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Errors of klog's flags, as klog words them.
var (
	errVmoduleSyntax   = errors.New("syntax error: expect comma-separated list of filename=N")
	errBacktraceSyntax = errors.New("syntax error: expect file.go:234")
)

// klogLevel is -v: an int32, as klog's Level.
type klogLevel int

func (l *klogLevel) String() string { return strconv.Itoa(int(*l)) }
func (l *klogLevel) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return err
	}
	*l = klogLevel(v)
	return nil
}

// vmoduleFlag is klog's --vmodule, pattern=N[,pattern=N...]: checked as klog checks
// it (flanneld refuses what klog refuses), kept, and otherwise unused.
type vmoduleFlag string

func (m *vmoduleFlag) String() string { return string(*m) }
func (m *vmoduleFlag) Set(s string) error {
	for _, pat := range strings.Split(s, ",") {
		if pat == "" {
			continue // klog ignores empty items (a trailing comma)
		}
		name, level, ok := strings.Cut(pat, "=")
		if !ok || name == "" || level == "" || strings.Contains(level, "=") {
			return errVmoduleSyntax
		}
		v, err := strconv.ParseInt(level, 10, 32)
		if err != nil {
			return errVmoduleSyntax
		}
		if v < 0 {
			return errors.New("negative value for vmodule level")
		}
	}
	*m = vmoduleFlag(s)
	return nil
}

// backtraceFlag is klog's --log_backtrace_at, file.go:N ("" unsets it): checked as
// klog checks it, kept, and otherwise unused.
type backtraceFlag string

func (b *backtraceFlag) String() string { return string(*b) }
func (b *backtraceFlag) Set(s string) error {
	if s != "" {
		file, line, ok := strings.Cut(s, ":")
		if !ok || strings.Contains(line, ":") || !strings.Contains(file, ".") {
			return errBacktraceSyntax
		}
		n, err := strconv.Atoi(line)
		if err != nil {
			return errBacktraceSyntax
		}
		if n <= 0 {
			return errors.New("negative or zero value for level")
		}
	}
	*b = backtraceFlag(s)
	return nil
}

// logLevel maps klog's -v onto zap: up to 0 info (klog's default, what flanneld logs
// without -v), 1 debug, and N above 1 zap's level -N, below debug. weftd logs nothing
// below debug, so every -v from 1 up shows the same lines today; the mapping keeps
// klog's order should finer lines come (a line at V(4) is zap level -4).
func logLevel(v int) zapcore.Level {
	switch {
	case v <= 0:
		return zapcore.InfoLevel
	case v >= -math.MinInt8:
		return zapcore.Level(math.MinInt8)
	}
	return zapcore.Level(-v)
}

// encodeLevel writes zap's level names, and "debug" for the levels below debug
// (-v 2 and up), so a log reader knows each line's level.
func encodeLevel(l zapcore.Level, enc zapcore.PrimitiveArrayEncoder) {
	if l < zapcore.DebugLevel {
		l = zapcore.DebugLevel
	}
	zapcore.LowercaseLevelEncoder(l, enc)
}

// newLogger logs JSON lines to w at the level of -v (logLevel).
func newLogger(w io.Writer, verbosity int) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	enc.EncodeLevel = encodeLevel
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), logLevel(verbosity))
	return zap.New(core)
}
