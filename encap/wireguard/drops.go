package wireguard

import (
	"sync"
	"sync/atomic"
)

// Why the userspace WireGuard device dropped a packet, as weft counts it.
const (
	wgDropUnknownType        = iota // not a WireGuard message type
	wgDropInvalidMAC1               // a handshake message whose mac1 is not for our key
	wgDropInvalidInitiation         // an initiation that does not decrypt (an unknown key)
	wgDropInvalidResponse           // a response that does not match an initiation of ours
	wgDropInvalidCookieReply        // a cookie reply that does not decode or decrypt
	wgDropHandshakeUnderLoad        // a handshake refused under load (a cookie reply sent instead)
	wgDropDisallowedSource          // a decrypted packet from a source outside the peer's AllowedIPs, or not IP
	wgDropReplayed                  // a transport message whose counter came before (transport/wgbind counts it)
	wgDropRelayedNotTaken           // a relayed datagram the device's queue could not take (transport/wgbind counts it)
	numWGDropReasons
)

// wgDropNames are the reasons' label values in /metrics and /stats.
var wgDropNames = [numWGDropReasons]string{
	"unknown_type", "invalid_mac1", "invalid_initiation", "invalid_response",
	"invalid_cookie_reply", "handshake_under_load", "disallowed_source", "replayed",
	"relayed_not_taken",
}

// wgDropLines maps the format strings of the lines wireguard-go's device logs when it
// drops a packet (its device/receive.go and device/send.go) to the reason counted.
// The device keeps no counters of its own; its logger is the one place it says what it
// dropped. Datagrams of the wrong size for their type, transport messages for no
// session and ones that fail to decrypt are dropped without a line, so they are not
// counted; replayed transport messages are dropped without one too, and weft's Bind
// counts them as it receives them (wgDropReplayed). TestWireGuardDropLines fails when wireguard-go words a line differently.
var wgDropLines = map[string]int{
	"Received message with unknown type":                          wgDropUnknownType,
	"Received packet with invalid mac1":                           wgDropInvalidMAC1,
	"Received invalid initiation message from %s":                 wgDropInvalidInitiation,
	"Received invalid response message from %s":                   wgDropInvalidResponse,
	"Failed to decode cookie reply":                               wgDropInvalidCookieReply,
	"Could not decrypt invalid cookie response":                   wgDropInvalidCookieReply,
	"Sending cookie response for denied handshake message for %v": wgDropHandshakeUnderLoad,
	"IPv4 packet with disallowed source address from %v":          wgDropDisallowedSource,
	"IPv6 packet with disallowed source address from %v":          wgDropDisallowedSource,
	"Packet with invalid IP version from %v":                      wgDropDisallowedSource,
}

// wgDeviceDrops counts one device's drops by reason.
type wgDeviceDrops [numWGDropReasons]atomic.Uint64

// count counts the drop that a log line of format reports, if it reports one.
func (d *wgDeviceDrops) count(format string) {
	if r, ok := wgDropLines[format]; ok {
		d[r].Add(1)
	}
}

// wgDropCounts holds the drop counts of the backend's userspace devices by name; a
// device made again (repair) goes on counting where the one before stopped.
type wgDropCounts struct {
	mu   sync.Mutex
	devs map[string]*wgDeviceDrops
}

func (c *wgDropCounts) device(name string) *wgDeviceDrops {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.devs == nil {
		c.devs = map[string]*wgDeviceDrops{}
	}
	d, ok := c.devs[name]
	if !ok {
		d = new(wgDeviceDrops)
		c.devs[name] = d
	}
	return d
}

// snapshot returns every userspace device's counts, by device and reason.
func (c *wgDropCounts) snapshot() map[string]map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]map[string]uint64, len(c.devs))
	for name, d := range c.devs {
		m := make(map[string]uint64, numWGDropReasons)
		for r := range d {
			m[wgDropNames[r]] = d[r].Load()
		}
		out[name] = m
	}
	return out
}
