package wireguard

import (
	"encoding/json"
	"errors"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/lease"
	"github.com/weftnet/weft/paths/way"
	"github.com/weftnet/weft/transport/relay"
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

// TestKeptRelayed: the hosts the path socket relays for are written beside the key
// every relayedSaveEvery while weftd runs (a killed weftd leaves them too), read back
// by the next weftd, with an unreadable entry left out and counted; with none
// relayed, the file goes.
func TestKeptRelayed(t *testing.T) {
	dir := t.TempDir()
	core, logs := observer.New(zap.InfoLevel)
	newBackend := func() *backend {
		return &backend{keyFile: filepath.Join(dir, "wgkey"), log: zap.New(core)}
	}
	key := func() relay.Key { k, _ := wgtypes.GeneratePrivateKey(); return relay.Key(k.PublicKey()) }
	now := time.Now()
	regs := []relay.Registration{
		{Key: key(), Addr: netip.MustParseAddrPort("192.0.2.1:51822"), At: now.Add(-time.Second), TS: 7},
		{Key: key(), Addr: netip.MustParseAddrPort("198.51.100.2:40000"), At: now.Add(-2 * time.Second), TS: 9},
	}
	var priv [32]byte
	n, err := relay.Listen(relay.Config{Addr: netip.MustParseAddr("127.0.0.1"), Private: priv, Registrations: regs})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	w := newBackend()
	w.node = n
	w.keepRelayed(now)
	if _, err := os.Stat(w.relayedPath()); err != nil {
		t.Fatalf("the relayed hosts were not written at the first tick: %v", err)
	}
	if err := os.Remove(w.relayedPath()); err != nil {
		t.Fatal(err)
	}
	w.keepRelayed(now.Add(relayedSaveEvery / 2))
	if _, err := os.Stat(w.relayedPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("written again before relayedSaveEvery: %v", err)
	}
	w.keepRelayed(now.Add(relayedSaveEvery))
	got := newBackend().loadRelayed()
	if len(got) != len(regs) {
		t.Fatalf("read back %+v, want %+v", got, regs)
	}
	for _, r := range regs {
		i := slices.IndexFunc(got, func(g relay.Registration) bool { return g.Key == r.Key })
		if i < 0 || got[i].Addr != r.Addr || got[i].TS != r.TS || !got[i].At.Equal(r.At) {
			t.Fatalf("read back %+v, want %+v among them", got, r)
		}
	}

	// Unreadable entries are left out and counted; the rest are read.
	var kept []keptRelayed
	data, err := os.ReadFile(w.relayedPath())
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &kept); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, keptRelayed{Key: "not a key", Addr: regs[0].Addr, At: now}, keptRelayed{Key: kept[0].Key, At: now})
	if err := writeKept(w.relayedPath(), kept); err != nil {
		t.Fatal(err)
	}
	logs.TakeAll()
	if got := newBackend().loadRelayed(); len(got) != len(regs) {
		t.Fatalf("read %d with two bad entries, want %d", len(got), len(regs))
	}
	left := logs.FilterField(zap.Int("left-out", 2)).Len()
	if left != 1 {
		t.Fatalf("%d warnings counting the 2 entries left out, want 1: %v", left, logs.All())
	}

	// None relayed: the file goes.
	empty, err := relay.Listen(relay.Config{Addr: netip.MustParseAddr("127.0.0.1"), Private: priv})
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	w = newBackend()
	w.node = empty
	w.keepRelayed(now)
	if _, err := os.Stat(w.relayedPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the file stays with none relayed: %v", err)
	}
}
