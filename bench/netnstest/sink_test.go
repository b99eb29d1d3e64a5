package netnstest

import (
	"net"
	"testing"
)

// TestSink: a datagram sent from the namespace to a sunk prefix is sent (no error)
// and counted leaving veth0; one to elsewhere has no route.
func TestSink(t *testing.T) {
	ns := Sink(t, "wt-sink", "198.51.100.0/24")
	before := TxPackets(t, ns)
	var sendErr, otherErr error
	if err := ns.Do(func() error {
		c, err := net.ListenUDP("udp4", nil)
		if err != nil {
			return err
		}
		defer c.Close()
		_, sendErr = c.WriteToUDP([]byte("x"), &net.UDPAddr{IP: net.IPv4(198, 51, 100, 7), Port: 9})
		_, otherErr = c.WriteToUDP([]byte("x"), &net.UDPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 9})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if sendErr != nil {
		t.Fatalf("send to the sunk prefix: %v", sendErr)
	}
	if otherErr == nil {
		t.Fatal("a send outside the sunk prefixes found a route")
	}
	if got := TxPackets(t, ns) - before; got != 1 {
		t.Fatalf("%d packets left veth0, want 1", got)
	}
}
