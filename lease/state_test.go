package lease

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var hostIDRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestStateFile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		initial string // "": no file
		want    State  // HostID "*": a new random identity
	}{
		{"missing", "", State{HostID: "*"}},
		{"round trip", `{"HostID":"h1","Network":"198.18.0.0/16","Subnet":"198.18.5.0/24"}`,
			State{HostID: "h1", Network: pfx("198.18.0.0/16"), Subnet: pfx("198.18.5.0/24")}},
		{"no identity yet", `{"Subnet":"198.18.5.0/24"}`, State{HostID: "*", Subnet: pfx("198.18.5.0/24")}},
		{"unknown fields", `{"HostID":"h1","Future":1}`, State{HostID: "h1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "var", "lib", "weft")
			path := filepath.Join(dir, "lease.json")
			if tc.initial != "" {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tc.initial), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s, err := LoadState(path)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want.HostID == "*" {
				if !hostIDRE.MatchString(s.HostID) {
					t.Errorf("new host id %q", s.HostID)
				}
				tc.want.HostID = s.HostID
			}
			if s != tc.want {
				t.Errorf("LoadState = %+v, want %+v", s, tc.want)
			}
			// The identity is durable: a second load gives the same state.
			again, err := LoadState(path)
			if err != nil || again != s {
				t.Errorf("second LoadState = %+v, %v; want %+v", again, err, s)
			}
			s.Network, s.Subnet = pfx("198.18.0.0/16"), pfx("198.18.77.0/24")
			if err := SaveState(path, s); err != nil {
				t.Fatal(err)
			}
			if back, err := LoadState(path); err != nil || back != s {
				t.Errorf("after SaveState: %+v, %v; want %+v", back, err, s)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, want 0600", fi.Mode().Perm())
			}
			onlyFiles(t, dir, "lease.json")
		})
	}
}

// A corrupt state file is an error naming the file (so the operator can remove it),
// and is left as it was.
func TestStateFileCorrupt(t *testing.T) {
	for _, corrupt := range []string{"{", "garbage", `{"HostID":5}`, `{"Subnet":"x"}`} {
		path := filepath.Join(t.TempDir(), "lease.json")
		if err := os.WriteFile(path, []byte(corrupt), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := LoadState(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "remove it") {
			t.Errorf("LoadState(%q) = %+v, %v; want an error naming the file", corrupt, s, err)
		}
		if data, _ := os.ReadFile(path); string(data) != corrupt {
			t.Errorf("corrupt file rewritten to %q", data)
		}
	}
}

// Without a state file there is no durable identity: no HostID, nothing written.
func TestStateFileDisabled(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	s, err := LoadState("")
	if err != nil || s != (State{}) {
		t.Errorf("LoadState(\"\") = %+v, %v; want an empty state", s, err)
	}
	if err := SaveState("", State{HostID: "h", Subnet: pfx("198.18.5.0/24")}); err != nil {
		t.Errorf("SaveState(\"\") = %v", err)
	}
	onlyFiles(t, dir)
}
