//go:build !linux

package proxy

import (
	"errors"

	"go.uber.org/zap"
)

// udpConn is not implemented on this platform.
type udpConn struct{}

type sockOpts struct {
	port      int
	reusePort bool
	bufBytes  int
	mmsg      bool
}

func listenUDP(sockOpts, int, [][]byte, *zap.Logger) (*udpConn, error) {
	return nil, errors.ErrUnsupported
}
func (u *udpConn) bufSizes() (int, int)      { return 0, 0 }
func (u *udpConn) stage(int, []byte, uint32) {}
func (u *udpConn) send(n int) (int, error)   { return n, errors.ErrUnsupported }
func (u *udpConn) recv() (int, error)        { return 0, errors.ErrUnsupported }
func (u *udpConn) size(int) int              { return 0 }
func (u *udpConn) src(int) uint32            { return 0 }
func (u *udpConn) close() error              { return nil }
