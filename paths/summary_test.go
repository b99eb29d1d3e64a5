package paths

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSummary(t *testing.T) {
	up := Peer{Subnet: "198.18.1.0/24", State: StateUp}
	down := Peer{Subnet: "198.18.3.0/24", State: StateDown, Reason: ReasonEncap, Endpoint: "192.0.2.3:8472"}
	mtu := Peer{Subnet: "198.18.4.0/24", State: StateDegraded, Reason: ReasonPathMTU, PathMTU: 1350}
	for _, tc := range []struct {
		name  string
		peers []Peer
		ok    bool
		msg   string
	}{
		{"none", nil, true, "0 of 0 peers reachable"},
		{"all up", []Peer{up, up}, true, "2 of 2 peers reachable"},
		{"one down", []Peer{up, down}, false, "1 of 2 peers down: 198.18.3.0/24 encap-blocked UDP 8472"},
		{"degraded is reachable", []Peer{up, mtu}, true, "2 of 2 peers reachable; 1 degraded: 198.18.4.0/24 path-mtu 1350"},
	} {
		ok, msg := Report{Peers: tc.peers}.Summary()
		if ok != tc.ok || msg != tc.msg {
			t.Errorf("%s: %v %q, want %v %q", tc.name, ok, msg, tc.ok, tc.msg)
		}
	}
}

func TestWriteTable(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	r := Report{Peers: []Peer{
		{Subnet: "198.18.2.0/24", PublicIP: "192.0.2.2", Backend: "vxlan", State: StateUp, RTTMicros: 310, PathMTU: 1450, Path: "direct", Since: now.Add(-90 * time.Second)},
		{Subnet: "198.18.3.0/24", PublicIP: "192.0.2.3", Backend: "vxlan", State: StateDown, Reason: ReasonEncap, Detail: "check UDP 8472", Loss: 1, Path: "direct", Since: now},
	}}
	var b bytes.Buffer
	if err := r.WriteTable(&b, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	for i, want := range [][]string{
		{"SUBNET", "PUBLIC IP", "STATE", "REASON", "RTT", "PATH MTU"},
		{"198.18.2.0/24", "192.0.2.2", "up", "310µs", "0%", "1450", "1m30s ago"},
		{"198.18.3.0/24", "down", "encap-blocked", "100%"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
	if !strings.Contains(b.String(), "198.18.3.0/24 (down): check UDP 8472") {
		t.Errorf("no detail line:\n%s", b.String())
	}
}

// TestParseSummary reads back what Summary writes, ways included, and refuses what it
// does not write.
func TestParseSummary(t *testing.T) {
	up := Peer{Subnet: "198.18.1.0/24", State: StateUp, Path: "direct"}
	punched := Peer{Subnet: "198.18.2.0/24", State: StateUp, Path: "punched"}
	relayed := Peer{Subnet: "198.18.5.0/24", State: StateUp, Path: "relay via 198.18.9.0/24"}
	down := Peer{Subnet: "198.18.3.0/24", State: StateDown, Reason: ReasonEncap, Endpoint: "192.0.2.3:8472"}
	mtu := Peer{Subnet: "198.18.4.0/24", State: StateDegraded, Reason: ReasonPathMTU, PathMTU: 1350}
	for _, tc := range []struct {
		name  string
		peers []Peer
		want  Summarized
	}{
		{"none", nil, Summarized{}},
		{"all up, no ways", []Peer{up, up}, Summarized{Peers: 2, Ways: Ways{Direct: 2}}},
		{"one down", []Peer{up, down}, Summarized{Peers: 2, Unreachable: 1, Down: []string{"198.18.3.0/24 encap-blocked UDP 8472"}, Ways: Ways{Direct: 2}}},
		{"degraded and ways", []Peer{mtu, punched, relayed, down},
			Summarized{Peers: 4, Unreachable: 1, Down: []string{"198.18.3.0/24 encap-blocked UDP 8472"}, Degraded: []string{"198.18.4.0/24 path-mtu 1350"},
				Ways: Ways{Direct: 2, Punched: 1, Relayed: 1}}},
	} {
		_, msg := Report{Peers: tc.peers}.Summary()
		got, err := ParseSummary(msg)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: ParseSummary(%q) = %+v, %v; want %+v", tc.name, msg, got, err, tc.want)
		}
	}
	// A condition's message cut at 256 bytes ("…"): the counts hold, the lists lose
	// their end.
	for _, tc := range []struct {
		msg  string
		want Summarized
	}{
		{"3 of 40 peers down: 198.18.3.0/24 encap-blocked UDP 8472, 198.18.5.0/24 encap-bl…",
			Summarized{Peers: 40, Unreachable: 3, Cut: true, Down: []string{"198.18.3.0/24 encap-blocked UDP 8472"}}},
		{"40 of 40 peers reachable; 1 degraded: 198.18.4.0/24 path-mtu 1350; ways: 3 dir…",
			Summarized{Peers: 40, Cut: true, Degraded: []string{"198.18.4.0/24 path-mtu 1350"}}},
	} {
		if got, err := ParseSummary(tc.msg); err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseSummary(%q) = %+v, %v; want %+v", tc.msg, got, err, tc.want)
		}
	}
	for _, msg := range []string{"", "Flannel is running on this node", "2 of 1 peers reachable", "1 of 2 peers down: a, b",
		"2 of 2 peers reachable; ways: many", "2 of 2 peers reachable; something else"} {
		if _, err := ParseSummary(msg); !errors.Is(err, ErrNotSummary) {
			t.Errorf("ParseSummary(%q): %v, want ErrNotSummary", msg, err)
		}
	}
}

func FuzzParseSummary(f *testing.F) {
	f.Add("1 of 2 peers down: 198.18.3.0/24 encap-blocked UDP 8472; 1 degraded: x; ways: 1 direct, 0 punched, 1 relayed")
	f.Fuzz(func(t *testing.T, msg string) {
		s, err := ParseSummary(msg)
		if err == nil && (s.Peers < 0 || s.Unreachable > s.Peers || len(s.Down) > s.Unreachable) {
			t.Fatalf("ParseSummary(%q) = %+v", msg, s)
		}
	})
}
