// Package etcdtest starts a real etcd server for a test and stops it at cleanup.
package etcdtest

import (
	"context"
	"testing"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/bench/testenv"
)

// Start runs etcd for t (loopback, free port, v2 API enabled) and removes it at cleanup.
// A missing etcd binary fails the test under WEFT_E2E=1 and skips it otherwise; under
// -short the test is skipped.
func Start(t testing.TB) *etcdproc.Server {
	t.Helper()
	testenv.SkipShort(t, "a real etcd server")
	testenv.NeedTools(t, "etcd")
	s, err := etcdproc.Start(context.Background(), etcdproc.Options{})
	if err != nil {
		t.Fatalf("etcd: %v", err)
	}
	testenv.OnInterrupt(t, "etcd", func() error { s.Close(); return nil })
	t.Cleanup(s.Close)
	return s
}
