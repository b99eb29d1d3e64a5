package paths

import (
	"encoding/binary"
	"errors"
	"time"
)

// The kinds of probe a round sends.
const (
	kindTunnel   byte = iota // small, through the tunnel
	kindFull                 // full-size with DF, through the tunnel
	kindUnderlay             // small, to the peer's public address
	kindSearch               // one size of an MTU search, through the tunnel
)

// A probe's echo data: magic, the peer's id, the kind, the round, the size sent
// (so an answer names the probe without any table of what was sent), the time sent.
// The rest up to the size is padding.
const (
	magic        = "wftp"
	probeDataLen = 4 + 4 + 1 + 2 + 2 + 8
)

// errNotProbe is returned for echo data that is not one of our probes.
var errNotProbe = errors.New("not a weft probe")

type probe struct {
	peer  uint32
	kind  byte
	round uint16
	size  uint16
	sent  time.Time
}

// put writes p into b, which has at least probeDataLen bytes.
func (p probe) put(b []byte) {
	copy(b, magic)
	binary.BigEndian.PutUint32(b[4:], p.peer)
	b[8] = p.kind
	binary.BigEndian.PutUint16(b[9:], p.round)
	binary.BigEndian.PutUint16(b[11:], p.size)
	binary.BigEndian.PutUint64(b[13:], uint64(p.sent.UnixNano()))
}

// parseProbe reads echo data written by put.
func parseProbe(b []byte) (probe, error) {
	if len(b) < probeDataLen || string(b[:4]) != magic || b[8] > kindSearch {
		return probe{}, errNotProbe
	}
	return probe{
		peer:  binary.BigEndian.Uint32(b[4:]),
		kind:  b[8],
		round: binary.BigEndian.Uint16(b[9:]),
		size:  binary.BigEndian.Uint16(b[11:]),
		sent:  time.Unix(0, int64(binary.BigEndian.Uint64(b[13:]))),
	}, nil
}
