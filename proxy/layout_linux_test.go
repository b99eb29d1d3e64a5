package proxy

import (
	"testing"
	"unsafe"
)

// TestHalvesApart checks that what the egress and the ingress goroutine write, tx
// and rx of a worker, can never share a cache line (transport.Conn has its own test).
func TestHalvesApart(t *testing.T) {
	var w worker
	for _, c := range []struct {
		name          string
		tx, txLen, rx uintptr
	}{
		{"worker", unsafe.Offsetof(w.tx), unsafe.Sizeof(w.tx), unsafe.Offsetof(w.rx)},
	} {
		if gap := int(c.rx) - int(c.tx+c.txLen); gap < cacheLine {
			t.Errorf("%s: rx starts %d bytes after tx ends, want at least %d", c.name, gap, cacheLine)
		}
	}
}
