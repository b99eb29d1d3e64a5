package wireguard

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/testenv"
)

// TestWireGuardDropLines: each line weft counts a drop by is one the wireguard-go
// module in go.mod logs, word for word (a module that rewords one would stop its
// count without this failing).
func TestWireGuardDropLines(t *testing.T) {
	testenv.NeedTools(t, "go")
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "golang.zx2c4.com/wireguard").Output()
	if err != nil {
		t.Fatalf("go list the wireguard-go module: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "device")
	var src strings.Builder
	for _, f := range []string{"receive.go", "send.go"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for line, reason := range wgDropLines {
		if !strings.Contains(src.String(), "device.log.Verbosef("+strconv.Quote(line)) {
			t.Errorf("wireguard-go (%s) logs no %q: the %s drops would go uncounted", dir, line, wgDropNames[reason])
		}
	}
}

func TestWireGuardDropCount(t *testing.T) {
	var c wgDropCounts
	d := c.device("flannel-wg")
	for _, f := range []string{
		"Received message with unknown type",
		"Received message with unknown type",
		"Received packet with invalid mac1",
		"Received invalid initiation message from %s",
		"Sending cookie response for denied handshake message for %v",
		"IPv6 packet with disallowed source address from %v",
		"Packet with invalid IP version from %v",
		"%v - Received handshake initiation", // not a drop
		"Routine: receive incoming %s - started",
	} {
		d.count(f)
	}
	if again := c.device("flannel-wg"); again != d {
		t.Fatal("a device made again does not go on with its counts")
	}
	got := c.snapshot()["flannel-wg"]
	want := map[string]uint64{"unknown_type": 2, "invalid_mac1": 1, "invalid_initiation": 1, "invalid_response": 0,
		"invalid_cookie_reply": 0, "handshake_under_load": 1, "disallowed_source": 2, "replayed": 0,
		"relayed_not_taken": 0}
	if len(got) != len(want) {
		t.Fatalf("reasons %v, want %v", got, want)
	}
	for r, n := range want {
		if got[r] != n {
			t.Errorf("%s: %d, want %d", r, got[r], n)
		}
	}
}
