package paths

import (
	"testing"
	"time"
)

// TestEchoRoundTrip: an echo request made by putEcho, answered as a host answers it
// (type changed, the rest echoed), parses back to the probe sent.
func TestEchoRoundTrip(t *testing.T) {
	sent := time.Unix(1_800_000_000, 123456789)
	for fam, size := range map[int]int{0: 1450, 1: 1430} {
		p := probe{peer: 7, kind: kindFull, round: 513, size: uint16(size), sent: sent}
		b := make([]byte, maxProbeLen)
		m := putEcho(b, fam, 0xbeef, p, size)
		if len(m)+ipHeader(fam) != size {
			t.Fatalf("family %d: message %d bytes, want %d with the IP header", fam, len(m), size)
		}
		if fam == 0 && checksum(m) != 0 {
			t.Fatalf("IPv4 checksum does not verify")
		}
		m[0] = echoTypes[fam][1]
		id, data, err := parseEchoReply(m, fam)
		if err != nil || id != 0xbeef {
			t.Fatalf("family %d: id %x err %v", fam, id, err)
		}
		got, err := parseProbe(data)
		if err != nil || got.peer != p.peer || got.kind != p.kind || got.round != p.round || got.size != p.size || !got.sent.Equal(sent) {
			t.Fatalf("family %d: got %+v err %v, want %+v", fam, got, err, p)
		}
	}
}

// TestNotOurs: requests, other programs' echoes and short messages are not probes.
func TestNotOurs(t *testing.T) {
	for name, m := range map[string][]byte{
		"empty":   nil,
		"request": {8, 0, 0, 0, 0, 1, 0, 1, 'w', 'f', 't', 'p'},
		"ping":    append([]byte{0, 0, 0, 0, 0, 1, 0, 1}, make([]byte, 56)...),
		"short":   {0, 0, 0, 0, 0, 1, 0, 1, 'w', 'f', 't', 'p', 0},
	} {
		_, data, err := parseEchoReply(m, 0)
		if err == nil {
			_, err = parseProbe(data)
		}
		if err == nil {
			t.Errorf("%s: taken for a probe", name)
		}
	}
}

// FuzzParse: no input crashes the reading of an answer.
func FuzzParse(f *testing.F) {
	b := make([]byte, maxProbeLen)
	f.Add(putEcho(b, 0, 1, probe{peer: 1}, 64))
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, m []byte) {
		for fam := 0; fam < 2; fam++ {
			if _, data, err := parseEchoReply(m, fam); err == nil {
				_, _ = parseProbe(data)
			}
		}
	})
}
