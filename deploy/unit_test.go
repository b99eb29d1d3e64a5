package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/testenv"
)

// unitSettings reads a systemd unit file into section.Key -> values (in order).
func unitSettings(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: not a setting: %q", path, line)
			}
			out[section+"."+k] = append(out[section+"."+k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSystemdUnit checks that weftd.service is a notify service with a watchdog that
// restarts on failure, reads FLANNELD_* settings from an environment file and holds
// only the capabilities weftd needs. e2e's TestSystemdUnitWireGuard runs it under a
// real systemd.
func TestSystemdUnit(t *testing.T) {
	u := unitSettings(t, "weftd.service")
	want := map[string]string{
		"Service.Type":            "notify",
		"Service.Restart":         "on-failure",
		"Service.WatchdogSec":     "30s",
		"Service.EnvironmentFile": "-/etc/default/weftd",
		"Service.ExecStart":       "/usr/local/bin/weftd",
		"Service.NotifyAccess":    "main",
		// A userspace WireGuard device (no kernel module) puts its UAPI socket in
		// /run/wireguard, read-only under ProtectSystem=strict unless the unit makes it.
		"Service.RuntimeDirectory":         "flannel wireguard",
		"Service.RuntimeDirectoryPreserve": "yes",
		"Service.DeviceAllow":              "/dev/net/tun rw",
		"Install.WantedBy":                 "multi-user.target",
	}
	for k, v := range want {
		if got := strings.Join(u[k], " "); got != v {
			t.Errorf("%s=%q, want %q", k, got, v)
		}
	}
	caps := strings.Fields(strings.Join(u["Service.CapabilityBoundingSet"], " "))
	if strings.Join(caps, " ") != "CAP_NET_ADMIN CAP_NET_RAW CAP_NET_BIND_SERVICE" {
		t.Errorf("CapabilityBoundingSet %v: want exactly NET_ADMIN, NET_RAW, NET_BIND_SERVICE", caps)
	}
	if got := strings.Join(u["Service.AmbientCapabilities"], " "); got != strings.Join(caps, " ") {
		t.Errorf("AmbientCapabilities %q differ from the bounding set %v", got, caps)
	}
}

// TestSystemdUnitVerify runs systemd-analyze verify on the unit, with ExecStart
// pointed at a weftd binary (verify insists the program exists).
func TestSystemdUnitVerify(t *testing.T) {
	testenv.SkipShort(t, "systemd-analyze")
	tools := testenv.NeedTools(t, "systemd-analyze")
	data, err := os.ReadFile("weftd.service")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.Executable() // any executable file will do for verify
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(t.TempDir(), "weftd.service")
	if err := os.WriteFile(unit, []byte(strings.ReplaceAll(string(data), "/usr/local/bin/weftd", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tools["systemd-analyze"], "verify", unit).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
