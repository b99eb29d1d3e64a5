//go:build !linux

package paths

import (
	"errors"
	"net/netip"
	"time"
)

// errUnsupported: probing needs Linux's raw sockets and IP_PMTUDISC_PROBE.
var errUnsupported = errors.New("peer probing is supported on Linux only")

type rawSocket struct{}

func listen(int) (*rawSocket, error)                         { return nil, errUnsupported }
func (*rawSocket) send([]byte, netip.Addr, netip.Addr) error { return errUnsupported }
func (*rawSocket) recv([]byte, time.Time) (int, netip.Addr, error) {
	return 0, netip.Addr{}, errUnsupported
}
func (*rawSocket) close() error { return nil }

func isClosed(error) bool { return true }

func noRoom(error) bool { return false }
