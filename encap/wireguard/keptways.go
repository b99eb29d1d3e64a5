package wireguard

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/paths/way"
	"github.com/weftnet/weft/transport/relay"
)

// WaysFile is the name of the file, beside the private key, where a host with a site
// keeps the ways that worked (punched at which NAT address, relayed by whom), so that
// a restarted weftd starts each peer there instead of on direct: a punched pair
// answers again at once instead of after direct's tryFor.
const WaysFile = "weft-ways.json"

// keptWay is one peer's way as the file keeps it.
type keptWay struct {
	Way string `json:"way"` // "punched" or "relay"
	// Outside is the NAT address a punched peer was reached at; Relay the subnet of
	// the relay of a relayed one.
	Outside netip.AddrPort `json:"outside,omitzero"`
	Relay   netip.Prefix   `json:"relay,omitzero"`
	At      time.Time      `json:"at"`
}

// keptWays are the file's contents: ways by the peer's public key.
type keptWays struct {
	Ways map[string]keptWay `json:"ways"`
}

// keptMaxAge: a way kept longer ago than this is not resumed (a NAT forgets its
// mappings in minutes).
const keptMaxAge = 10 * time.Minute

// waysPath is the ways file of the backend: beside the private key.
func (w *backend) waysPath() string { return filepath.Join(filepath.Dir(w.keyFile), WaysFile) }

// loadKeptWays reads the ways an earlier weftd kept; a missing or unreadable file
// (logged) keeps none.
func (w *backend) loadKeptWays() {
	data, err := os.ReadFile(w.waysPath())
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var k keptWays
	if err == nil {
		err = json.Unmarshal(data, &k)
	}
	if err != nil {
		w.log.Warn("the ways kept before the restart are unreadable; every peer starts direct", zap.String("file", w.waysPath()), zap.Error(err))
		return
	}
	w.keptWays = map[wgtypes.Key]keptWay{}
	for s, kw := range k.Ways {
		key, err := wgtypes.ParseKey(s)
		if err != nil || time.Since(kw.At) > keptMaxAge || (kw.Way != "punched" && kw.Way != "relay") {
			continue
		}
		w.keptWays[key] = kw
	}
	if len(w.keptWays) > 0 {
		w.log.Info("ways kept before the restart", zap.String("file", w.waysPath()), zap.Int("peers", len(w.keptWays)))
	}
}

// resumeWay starts peer key (public key pk) on the way an earlier weftd kept for it,
// if its lease still publishes that NAT address (punched) or the relay's lease is
// known (relay); it reports whether it did. The kept way is used once. w.mu is held.
func (w *backend) resumeWay(key netip.Prefix, pk wgtypes.Key, ws *way.State) bool {
	kw, ok := w.keptWays[pk]
	if !ok {
		return false
	}
	delete(w.keptWays, pk)
	l := w.leases[key]
	switch kw.Way {
	case "punched":
		if !l.Attrs.Outside.IsValid() || l.Attrs.Outside != kw.Outside {
			return false
		}
		ws.Resume(way.Punched, netip.Prefix{}, netip.AddrPort{}, fmt.Sprintf("punched: the way that worked before weftd restarted (%v)", kw.Outside))
	case "relay":
		rl, ok := w.leases[kw.Relay]
		if !ok || !directAddr(rl).Is4() {
			return false
		}
		ws.Resume(way.Relay, kw.Relay, w.pathAddr(kw.Relay), fmt.Sprintf("relay via %v: the way that worked before weftd restarted", kw.Relay))
	default:
		return false
	}
	w.pathChanges++ // a kept way is trusted for TryNew (Resume), as it worked
	w.relayMTU(l.Subnet, ws.Way == way.Relay)
	w.log.Info("peer path", zap.Stringer("subnet", key), zap.Stringer("way", ws.Way), zap.String("why", ws.Why))
	return true
}

// saveWays writes the ways that work now (punched and answering, or relayed) to the
// ways file, replacing it: when they changed, and once a minute (their time says
// when this weftd last ran). w.mu is held.
func (w *backend) saveWays() {
	k := keptWays{Ways: map[string]keptWay{}}
	for key, ws := range w.ways {
		c := w.base[key][0]
		if c == nil {
			continue
		}
		switch {
		case ws.Way == way.Punched && ws.Answered:
			k.Ways[c.key.String()] = keptWay{Way: "punched", Outside: w.leases[key].Attrs.Outside}
		case ws.Way == way.Relay && ws.Relay.IsValid():
			k.Ways[c.key.String()] = keptWay{Way: "relay", Relay: ws.Relay}
		}
	}
	sig, _ := json.Marshal(k) // without times: what the file says
	now := time.Now().UTC()
	if string(sig) == w.waysSaved && now.Sub(w.waysSavedAt) < time.Minute {
		return
	}
	for s, kw := range k.Ways {
		kw.At = now
		k.Ways[s] = kw
	}
	err := writeKept(w.waysPath(), k)
	// Tried again when the ways change, or after a minute: not every tick.
	w.waysSaved, w.waysSavedAt = string(sig), now
	if err != nil {
		w.log.Warn("keeping the ways for the next start", zap.String("file", w.waysPath()), zap.Error(err))
	}
}

// RelayedFile is the name of the file, beside the private key, where weftd keeps the
// hosts its path socket relays for when it stops, so that the next weftd relays for
// them at once: without it their frames were dropped until each said hello again,
// up to relay.HelloEvery later (7.5 s of a relayed pair's pings in the sites lab).
const RelayedFile = "weft-relayed.json"

// keptRelayed is one host the path socket relayed for, as the file keeps it.
type keptRelayed struct {
	Key  string         `json:"key"`
	Addr netip.AddrPort `json:"addr"`
	At   time.Time      `json:"at"`
	TS   uint64         `json:"ts"`
}

func (w *backend) relayedPath() string { return filepath.Join(filepath.Dir(w.keyFile), RelayedFile) }

// loadRelayed reads the hosts an earlier weftd's path socket relayed for; a missing
// or unreadable file (logged) gives none.
func (w *backend) loadRelayed() []relay.Registration {
	data, err := os.ReadFile(w.relayedPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var kept []keptRelayed
	if err == nil {
		err = json.Unmarshal(data, &kept)
	}
	if err != nil {
		w.log.Warn("the hosts relayed before the restart are unreadable; each is relayed again after its next hello", zap.String("file", w.relayedPath()), zap.Error(err))
		return nil
	}
	var rs []relay.Registration
	bad := 0
	for _, k := range kept {
		key, err := wgtypes.ParseKey(k.Key)
		if err != nil || !k.Addr.IsValid() {
			bad++
			continue
		}
		rs = append(rs, relay.Registration{Key: relay.Key(key), Addr: k.Addr, At: k.At, TS: k.TS})
	}
	if bad > 0 {
		w.log.Warn("hosts relayed before the restart left out: a key or address unreadable; each is relayed again after its next hello",
			zap.String("file", w.relayedPath()), zap.Int("left-out", bad))
	}
	if len(rs) > 0 {
		w.log.Info("relaying at once for the hosts relayed before the restart",
			zap.String("file", w.relayedPath()), zap.Int("hosts", len(rs)))
	}
	return rs
}

// relayedSaveEvery is how often the hosts relayed for are written while weftd runs,
// beside Close: a weftd killed or crashed leaves them too, none older than this, well
// within the 45 s a registration lasts. It also keeps the newest hello times, so
// fewer old hellos can be replayed to the next weftd than with no file at all.
const relayedSaveEvery = 10 * time.Second

// keepRelayed saves the relayed hosts every relayedSaveEvery. w.mu is held.
func (w *backend) keepRelayed(now time.Time) {
	if w.node == nil || now.Sub(w.relayedSavedAt) < relayedSaveEvery {
		return
	}
	w.relayedSavedAt = now
	w.saveRelayed(w.node)
}

// saveRelayed writes the hosts the path socket relays for now to the relayed file,
// for the next weftd; with none, it removes the file.
func (w *backend) saveRelayed(n *relay.Node) {
	rs := n.Registrations()
	if len(rs) == 0 {
		if err := os.Remove(w.relayedPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
			w.log.Warn("removing the relayed hosts an earlier weftd kept", zap.String("file", w.relayedPath()), zap.Error(err))
		}
		return
	}
	kept := make([]keptRelayed, 0, len(rs))
	for _, r := range rs {
		kept = append(kept, keptRelayed{Key: wgtypes.Key(r.Key).String(), Addr: r.Addr, At: r.At.UTC(), TS: r.TS})
	}
	if err := writeKept(w.relayedPath(), kept); err != nil {
		w.log.Warn("keeping the relayed hosts for the next start", zap.String("file", w.relayedPath()), zap.Error(err))
	}
}

// writeKept writes v as JSON to path (mode 0600), replacing the file in one step: a
// weftd killed while it writes leaves the old file or the new, never half of one.
func writeKept(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return nil
}
