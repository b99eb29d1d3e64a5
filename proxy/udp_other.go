//go:build !linux

package proxy

import (
	"errors"
	"net/netip"

	"go.uber.org/zap"
)

// udpConn is not implemented on this platform.
type udpConn struct {
	tx struct {
		gso  bool
		dst6 [16]byte
		n    int
	}
	rx struct{ gro bool }
}

type sockOpts struct {
	addr      netip.Addr // zero: every address
	port      int
	reusePort bool
	bufBytes  int
	mmsg      bool
	gso       bool
	gro       bool
	v6        bool
}

func listenUDP(sockOpts, int, int, [][]byte, *zap.Logger) (*udpConn, error) {
	return nil, errors.ErrUnsupported
}
func (u *udpConn) bufSizes() (int, int)    { return 0, 0 }
func (u *udpConn) room(int) bool           { return true }
func (u *udpConn) stage([]byte, uint32)    {}
func (u *udpConn) stageRun([]byte, uint32) {}
func (u *udpConn) begin(uint32)            {}
func (u *udpConn) addIov([]byte)           {}
func (u *udpConn) end(int, int)            {}
func (u *udpConn) send() (int, error)      { return 0, errors.ErrUnsupported }
func (u *udpConn) recv() (int, error)      { return 0, errors.ErrUnsupported }
func (u *udpConn) size(int) int            { return 0 }
func (u *udpConn) segSize(int) int         { return 0 }
func (u *udpConn) src(int) uint32          { return 0 }
func (u *udpConn) src6(int) [16]byte       { return [16]byte{} }
func (u *udpConn) close() error            { return nil }
