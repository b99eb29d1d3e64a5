package transport

import (
	"net"
	"net/netip"
	"testing"

	"go.uber.org/zap"
)

// TestListenBindsAddr: with an Addr the socket is bound to it, as flanneld binds its
// interface's address; without one it takes every address.
func TestListenBindsAddr(t *testing.T) {
	for _, c := range []struct {
		addr netip.Addr
		want string
	}{
		{addr: netip.MustParseAddr("127.0.0.1"), want: "127.0.0.1"},
		{want: "0.0.0.0"},
	} {
		t.Run(c.want, func(t *testing.T) {
			u, err := Listen(Options{Addr: c.addr, Port: freeUDPPort(t), SocketBuffer: -1}, [][]byte{make([]byte, 64)}, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			defer u.Close()
			got := u.LocalAddr()
			if got.Addr().String() != c.want {
				t.Fatalf("bound to %v, want %s", got, c.want)
			}
		})
	}
}

func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}
