package netnstest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/netns"
)

// Sink makes a namespace for t whose sends to dsts (prefixes such as
// "198.51.100.0/22") leave on veth0, a veth to a namespace of its own, for a
// neighbour nobody is (a permanent entry with a MAC no link has): each send costs
// what a real one costs up to the wire, nothing answers, and nothing leaves the two
// namespaces. TxPackets reads how many left.
func Sink(t testing.TB, prefix string, dsts ...string) *netns.NS {
	t.Helper()
	a, r := New(t, prefix), New(t, prefix+"r")
	if err := netns.Veth(a, "veth0", r, "veth0"); err != nil {
		t.Fatal(err)
	}
	args := [][]string{
		{"addr", "add", "192.0.2.10/24", "dev", "veth0"},
		{"link", "set", "lo", "up"},
		{"neigh", "add", "192.0.2.3", "lladdr", "02:00:00:00:00:03", "dev", "veth0", "nud", "permanent"},
	}
	for _, d := range dsts {
		args = append(args, []string{"route", "add", d, "via", "192.0.2.3"})
	}
	for _, a1 := range args {
		if out, err := a.Run(context.Background(), "ip", a1...); err != nil {
			t.Fatalf("ip %s in %s: %v: %s", strings.Join(a1, " "), a.Name, err, out)
		}
	}
	return a
}

// TxPackets is how many packets left ns's veth0 (a GSO message counts once).
func TxPackets(t testing.TB, ns *netns.NS) int {
	t.Helper()
	out, err := ns.Run(context.Background(), "cat", "/sys/class/net/veth0/statistics/tx_packets")
	if err != nil {
		t.Fatalf("tx_packets of %s: %v: %s", ns.Name, err, out)
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("tx_packets of %s: %v", ns.Name, err)
	}
	return n
}
