//go:build !linux

package relay

import "net"

// setBuffers gives a loopback socket n bytes to receive and send, as far as the
// system allows.
func setBuffers(c *net.UDPConn, n int) {
	_ = c.SetReadBuffer(n)
	_ = c.SetWriteBuffer(n)
}
