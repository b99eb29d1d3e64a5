package relay

import (
	"net"

	"golang.org/x/sys/unix"
)

// setBuffers gives a loopback socket n bytes to receive and send, past the
// system's maximum where we may (root: SO_RCVBUFFORCE), else as far as it allows.
func setBuffers(c *net.UDPConn, n int) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n) != nil {
			_ = c.SetReadBuffer(n)
		}
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, n) != nil {
			_ = c.SetWriteBuffer(n)
		}
	})
}
