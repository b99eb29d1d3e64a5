package wireguard

import (
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/paths/way"
)

// TestKeptWays: the ways that work (punched and answering, relayed) are saved beside
// the key and resumed by the next weftd, once each, only where the peer's lease still
// publishes the NAT address (punched) and the relay is still a lease (relay); a file
// older than keptMaxAge resumes nothing.
func TestKeptWays(t *testing.T) {
	dir := t.TempDir()
	key := func() wgtypes.Key { k, _ := wgtypes.GeneratePrivateKey(); return k.PublicKey() }
	punchedKey, relayedKey, directKey := key(), key(), key()
	pfx := netip.MustParsePrefix
	outside := netip.MustParseAddrPort("203.0.113.7:40001")
	leases := map[netip.Prefix]lease.Lease{
		pfx("198.18.1.0/24"): {Subnet: pfx("198.18.1.0/24"), Attrs: lease.Attrs{Outside: outside, NAT: true}},
		pfx("198.18.2.0/24"): {Subnet: pfx("198.18.2.0/24"), Attrs: lease.Attrs{NAT: true}},
		pfx("198.18.3.0/24"): {Subnet: pfx("198.18.3.0/24"), Attrs: lease.Attrs{PublicIP: netip.MustParseAddr("192.0.2.3")}},
		pfx("198.18.9.0/24"): {Subnet: pfx("198.18.9.0/24"), Attrs: lease.Attrs{PublicIP: netip.MustParseAddr("192.0.2.9")}}, // the relay
	}
	base := map[netip.Prefix][2]*wgPeerConf{
		pfx("198.18.1.0/24"): {{key: punchedKey}}, pfx("198.18.2.0/24"): {{key: relayedKey}}, pfx("198.18.3.0/24"): {{key: directKey}},
	}
	newBackend := func() *backend {
		return &backend{keyFile: filepath.Join(dir, "wgkey"), log: zaptest.NewLogger(t), leases: leases, base: base,
			ways: map[netip.Prefix]*way.State{}, pathPort: 51822}
	}
	old := newBackend()
	old.ways[pfx("198.18.1.0/24")] = &way.State{Way: way.Punched, Answered: true}
	old.ways[pfx("198.18.2.0/24")] = &way.State{Way: way.Relay, Relay: pfx("198.18.9.0/24")}
	old.ways[pfx("198.18.3.0/24")] = &way.State{Way: way.Direct, Answered: true}
	old.saveWays()

	w := newBackend()
	w.loadKeptWays()
	if len(w.keptWays) != 2 {
		t.Fatalf("kept %v, want the punched and the relayed peer", w.keptWays)
	}
	for _, tc := range []struct {
		name string
		sn   netip.Prefix
		pk   wgtypes.Key
		ok   bool
		want way.Way
	}{
		{"punched", pfx("198.18.1.0/24"), punchedKey, true, way.Punched},
		{"punched once", pfx("198.18.1.0/24"), punchedKey, false, way.Direct},
		{"relayed", pfx("198.18.2.0/24"), relayedKey, true, way.Relay},
		{"direct kept nothing", pfx("198.18.3.0/24"), directKey, false, way.Direct},
	} {
		ws := &way.State{}
		if got := w.resumeWay(tc.sn, tc.pk, ws); got != tc.ok || ws.Way != tc.want {
			t.Errorf("%s: resumed %v on %v, want %v on %v", tc.name, got, ws.Way, tc.ok, tc.want)
		}
		if tc.want == way.Relay && (ws.Relay != pfx("198.18.9.0/24") || ws.RelayAddr != netip.MustParseAddrPort("192.0.2.9:51822")) {
			t.Errorf("%s: relay %v at %v", tc.name, ws.Relay, ws.RelayAddr)
		}
	}

	// A NAT address that changed since, and a file too old.
	w = newBackend()
	w.loadKeptWays()
	moved := maps.Clone(leases)
	l := moved[pfx("198.18.1.0/24")]
	l.Attrs.Outside = netip.MustParseAddrPort("203.0.113.7:40002")
	moved[pfx("198.18.1.0/24")] = l
	w.leases = moved
	if w.resumeWay(pfx("198.18.1.0/24"), punchedKey, &way.State{}) {
		t.Error("resumed punching at a NAT address the peer no longer publishes")
	}
	var k keptWays
	data, _ := os.ReadFile(filepath.Join(dir, WaysFile))
	if err := json.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	for s, kw := range k.Ways {
		kw.At = time.Now().Add(-keptMaxAge - time.Minute)
		k.Ways[s] = kw
	}
	data, _ = json.Marshal(k)
	if err := os.WriteFile(filepath.Join(dir, WaysFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	w = newBackend()
	w.loadKeptWays()
	if len(w.keptWays) != 0 {
		t.Errorf("resumes ways kept %v ago: %v", keptMaxAge+time.Minute, w.keptWays)
	}
}
