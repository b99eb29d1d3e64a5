package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftnet/weft/bench/testenv"
)

// dropIn is the drop-in for weftd.service on a host whose flanneld ran from a
// distribution's flanneld.service (docs/from-flanneld-systemd.md).
const dropIn = "weftd.service.d/flanneld-sysconfig.conf"

// TestSysconfigDropIn checks that the drop-in reads /etc/sysconfig/flanneld (required,
// as flanneld.service reads it), replaces weftd.service's ExecStart rather than adding
// a second one, and starts the weftd the unit starts. e2e's TestFlanneldSystemdSwitch
// runs it under a real systemd and checks the arguments weftd gets.
func TestSysconfigDropIn(t *testing.T) {
	u := unitSettings(t, dropIn)
	if got := strings.Join(u["Service.EnvironmentFile"], " "); got != "/etc/sysconfig/flanneld" {
		t.Errorf("EnvironmentFile=%q, want /etc/sysconfig/flanneld (required, as flanneld.service has it)", got)
	}
	start := u["Service.ExecStart"]
	if len(start) != 2 || start[0] != "" {
		t.Fatalf("ExecStart %q: want an empty ExecStart= (reset), then one command", start)
	}
	unit := strings.Join(unitSettings(t, "weftd.service")["Service.ExecStart"], " ")
	if !strings.Contains(start[1], "exec "+unit+" ") {
		t.Errorf("ExecStart %q does not exec %s, the unit's weftd", start[1], unit)
	}
	for _, v := range []string{"FLANNEL_ETCD_ENDPOINTS", "FLANNEL_ETCD}", "FLANNEL_ETCD_PREFIX", "FLANNEL_ETCD_KEY", "$FLANNEL_OPTIONS"} {
		if !strings.Contains(start[1], v) {
			t.Errorf("ExecStart %q does not read %s", start[1], v)
		}
	}
}

// TestSysconfigDropInVerify runs systemd-analyze verify on weftd.service with the
// drop-in beside it in weftd.service.d, as systemd would load them, with weftd
// replaced by an executable that exists.
func TestSysconfigDropInVerify(t *testing.T) {
	testenv.SkipShort(t, "systemd-analyze")
	tools := testenv.NeedTools(t, "systemd-analyze")
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"weftd.service", dropIn} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(strings.ReplaceAll(string(data), "/usr/local/bin/weftd", bin)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(tools["systemd-analyze"], "verify", filepath.Join(dir, "weftd.service")).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify with the drop-in: %v\n%s", err, out)
	}
}
