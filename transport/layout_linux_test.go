package transport

import (
	"testing"
	"unsafe"
)

// TestHalvesApart checks that what the sending and the receiving goroutine write, tx
// and rx of a Conn, can never share a cache line.
func TestHalvesApart(t *testing.T) {
	var u Conn
	if gap := int(unsafe.Offsetof(u.rx)) - int(unsafe.Offsetof(u.tx)+unsafe.Sizeof(u.tx)); gap < cacheLine {
		t.Errorf("rx starts %d bytes after tx ends, want at least %d", gap, cacheLine)
	}
}
