//go:build !linux

package transport

import (
	"errors"
	"net/netip"
	"os"
	"time"

	"go.uber.org/zap"
)

// Conn is not implemented on this platform: Listen fails with errors.ErrUnsupported.
type Conn struct{}

// Listen is not implemented on this platform.
func Listen(Options, [][]byte, *zap.Logger) (*Conn, error) { return nil, errors.ErrUnsupported }

func (*Conn) File() (*os.File, error)               { return nil, errors.ErrUnsupported }
func (*Conn) BufSizes() (int, int)                  { return 0, 0 }
func (*Conn) LocalAddr() netip.AddrPort             { return netip.AddrPort{} }
func (*Conn) GSO() bool                             { return false }
func (*Conn) GRO() bool                             { return false }
func (*Conn) Staged() int                           { return 0 }
func (*Conn) Room(int) bool                         { return true }
func (*Conn) Stage([]byte, netip.AddrPort) error    { return errors.ErrUnsupported }
func (*Conn) StageRun([]byte, netip.AddrPort) error { return errors.ErrUnsupported }
func (*Conn) StageRunParts([]byte, []byte, netip.AddrPort) error {
	return errors.ErrUnsupported
}
func (*Conn) Begin(netip.AddrPort) error            { return errors.ErrUnsupported }
func (*Conn) BeginFrom(netip.AddrPort, Local) error { return errors.ErrUnsupported }
func (*Conn) StageFrom([]byte, netip.AddrPort, Local) error {
	return errors.ErrUnsupported
}
func (*Conn) StageRunFrom([]byte, netip.AddrPort, Local) error {
	return errors.ErrUnsupported
}
func (*Conn) Local(int) Local             { return Local{} }
func (*Conn) AddIov([]byte)               {}
func (*Conn) End(int, int)                {}
func (*Conn) Send() (int, error)          { return 0, errors.ErrUnsupported }
func (*Conn) Recv() (int, error)          { return 0, errors.ErrUnsupported }
func (*Conn) TryRecv() (int, error)       { return 0, errors.ErrUnsupported }
func (*Conn) Control(func(uintptr)) error { return errors.ErrUnsupported }
func (*Conn) Size(int) int                { return 0 }
func (*Conn) SegSize(int) int             { return 0 }
func (*Conn) From(int) netip.AddrPort     { return netip.AddrPort{} }
func (*Conn) Close() error                { return nil }

func (*Conn) SetReadDeadline(time.Time) error { return errors.ErrUnsupported }
