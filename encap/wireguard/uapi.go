package wireguard

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// uapiConfig writes c as a UAPI "set" body (the cross-platform userspace
// configuration protocol), which wireguard-go's device applies as wgctrl's Config.
func uapiConfig(c wgtypes.Config) string {
	var b strings.Builder
	if c.PrivateKey != nil {
		fmt.Fprintf(&b, "private_key=%s\n", hex.EncodeToString(c.PrivateKey[:]))
	}
	if c.ListenPort != nil {
		fmt.Fprintf(&b, "listen_port=%d\n", *c.ListenPort)
	}
	if c.FirewallMark != nil {
		fmt.Fprintf(&b, "fwmark=%d\n", *c.FirewallMark)
	}
	if c.ReplacePeers {
		b.WriteString("replace_peers=true\n")
	}
	for _, p := range c.Peers {
		fmt.Fprintf(&b, "public_key=%s\n", hex.EncodeToString(p.PublicKey[:]))
		if p.Remove {
			b.WriteString("remove=true\n")
			continue
		}
		if p.UpdateOnly {
			b.WriteString("update_only=true\n")
		}
		if p.PresharedKey != nil {
			fmt.Fprintf(&b, "preshared_key=%s\n", hex.EncodeToString(p.PresharedKey[:]))
		}
		if p.Endpoint != nil {
			ap := p.Endpoint.AddrPort() // an IPv4 net.IP of 16 bytes comes out mapped
			fmt.Fprintf(&b, "endpoint=%s\n", netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
		}
		if p.PersistentKeepaliveInterval != nil {
			fmt.Fprintf(&b, "persistent_keepalive_interval=%d\n", int(p.PersistentKeepaliveInterval.Seconds()))
		}
		if p.ReplaceAllowedIPs {
			b.WriteString("replace_allowed_ips=true\n")
		}
		for _, a := range p.AllowedIPs {
			fmt.Fprintf(&b, "allowed_ip=%s\n", a.String())
		}
	}
	return b.String()
}

// parseUAPIPeers reads the peers of a UAPI "get" answer: after each public_key, its
// endpoint and last handshake (lines it does not know are skipped, bad values leave
// the field zero).
func parseUAPIPeers(text string) map[wgtypes.Key]peerStatus {
	out := map[wgtypes.Key]peerStatus{}
	var key wgtypes.Key
	var cur *peerStatus
	var sec, nsec int64
	flush := func() {
		if cur != nil {
			if sec != 0 || nsec != 0 {
				cur.handshake = time.Unix(sec, nsec)
			}
			out[key] = *cur
		}
	}
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		switch k {
		case "public_key":
			flush()
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != len(key) {
				cur = nil
				continue
			}
			copy(key[:], b)
			cur, sec, nsec = &peerStatus{}, 0, 0
		case "endpoint":
			if ap, err := netip.ParseAddrPort(v); err == nil && cur != nil {
				cur.endpoint = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			}
		case "last_handshake_time_sec":
			sec, _ = strconv.ParseInt(v, 10, 64)
		case "last_handshake_time_nsec":
			nsec, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	flush()
	return out
}
