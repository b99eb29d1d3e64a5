package extension

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/encap"
	"github.com/weftnet/weft/lease"
)

// recorder writes a shell script to dir that appends one record of each run to
// dir/log: its name, its arguments (one per line, each between < and >), the
// environment variables the extension backend sets (unset ones as "-") and its
// stdin. It prints out on stdout and errOut on stderr and exits with status code.
func recorder(t *testing.T, dir, name, out, errOut string, code int) string {
	t.Helper()
	testenv.NeedTools(t, "sh")
	path := filepath.Join(dir, name)
	script := `#!/bin/sh
log=` + filepath.Join(dir, "log") + `
{
	echo "== ` + name + `"
	for a in "$@"; do echo "arg <$a>"; done
	for v in NETWORK SUBNET IPV6SUBNET PUBLIC_IP PUBLIC_IPV6; do
		eval "echo $v=\${$v-\"-\"}"
	done
	echo "stdin:"
	cat
	echo "end"
} >>"$log"
printf '%s' '` + out + `'
printf '%s' '` + errOut + `' >&2
exit ` + fmt.Sprint(code) + `
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func readLog(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "log"))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func extensionConfig(t *testing.T, opts map[string]string) *lease.Config {
	t.Helper()
	m := map[string]string{"Type": "extension"}
	for k, v := range opts {
		m[k] = v
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(string(raw))
	cfg.BackendType = "extension"
	return cfg
}

var extTestIface = encap.ExternalInterface{Name: "eth0", MTU: 1480,
	IfaceIP: netip.MustParseAddr("192.0.2.10"), PublicIP: netip.MustParseAddr("192.0.2.10")}

func peerLease(subnet, publicIP, typ, data string) lease.Lease {
	l := lease.Lease{Subnet: netip.MustParsePrefix(subnet),
		Attrs: lease.Attrs{PublicIP: netip.MustParseAddr(publicIP), BackendType: typ}}
	if data != "" {
		l.Attrs.BackendData = json.RawMessage(data)
	}
	return l
}

// TestExtensionCommands runs every command of a config through recording scripts and
// checks what flanneld v0.28.10 gives its commands: arguments split on blanks with
// variables expanded and quotes kept, the environment, stdin (with its newline), and
// the lease's BackendData from PreStartupCommand's trimmed stdout and stderr.
func TestExtensionCommands(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("WEFT_EXT_TEST", "from-weftd")
	pre := recorder(t, dir, "pre", "  vtep 0e:00:00:00:00:01 <&>\n", "warn\n", 0)
	post := recorder(t, dir, "post", "", "", 0)
	add := recorder(t, dir, "add", "added", "", 0)
	del := recorder(t, dir, "del", "", "", 0)
	cfg := extensionConfig(t, map[string]string{
		"PreStartupCommand":   pre + ` one  "two three" $WEFT_EXT_TEST ${NOPE}x`,
		"PostStartupCommand":  post + ` $SUBNET`,
		"SubnetAddCommand":    add + ` "$SUBNET" via $PUBLIC_IP`,
		"SubnetRemoveCommand": del,
	})
	be, err := New(cfg, extTestIface, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if be.Type() != "extension" || be.MTU() != 1480 {
		t.Fatalf("type %q, MTU %d", be.Type(), be.MTU())
	}
	ctx := context.Background()
	data, err := be.BackendData(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// stdout and stderr together, trimmed, as a JSON string (HTML characters escaped, as
	// encoding/json writes them in flanneld).
	if want := `"vtep 0e:00:00:00:00:01 \u003c\u0026\u003e\nwarn"`; string(data) != want {
		t.Errorf("BackendData %s, want %s", data, want)
	}
	if again, err := be.BackendData(ctx); err != nil || string(again) != string(data) {
		t.Errorf("BackendData again: %s, %v", again, err)
	}
	own := lease.Lease{Subnet: netip.MustParsePrefix("198.18.7.0/24"),
		Attrs: lease.Attrs{PublicIP: netip.MustParseAddr("192.0.2.10"), BackendType: "extension", BackendData: data}}
	if err := be.Register(ctx, own); err != nil {
		t.Fatal(err)
	}
	be.HandleEvents(ctx, []lease.Event{
		{Type: lease.Added, Lease: peerLease("198.18.9.0/24", "192.0.2.20", "extension", `"peer data"`)},
		{Type: lease.Added, Lease: peerLease("198.18.10.0/24", "192.0.2.21", "vxlan", `{"VNI":1}`)},
		{Type: lease.Added, Lease: peerLease("198.18.11.0/24", "192.0.2.22", "extension", `{"VNI":1}`)},
		{Type: lease.Added, Lease: peerLease("198.18.12.0/24", "192.0.2.23", "extension", "")},
		{Type: lease.Removed, Lease: peerLease("198.18.9.0/24", "192.0.2.20", "extension", `"peer data"`)},
	})
	want := `== pre
arg <one>
arg <"two>
arg <three">
arg <from-weftd>
arg <x>
NETWORK=-
SUBNET=-
IPV6SUBNET=-
PUBLIC_IP=-
PUBLIC_IPV6=-
stdin:

end
== post
arg <198.18.7.0/24>
NETWORK=198.18.0.0/16
SUBNET=198.18.7.0/24
IPV6SUBNET=::/0
PUBLIC_IP=192.0.2.10
PUBLIC_IPV6=<nil>
stdin:

end
== add
arg <"198.18.9.0/24">
arg <via>
arg <192.0.2.20>
NETWORK=-
SUBNET=198.18.9.0/24
IPV6SUBNET=-
PUBLIC_IP=192.0.2.20
PUBLIC_IPV6=-
stdin:
peer data
end
== add
arg <"198.18.12.0/24">
arg <via>
arg <192.0.2.23>
NETWORK=-
SUBNET=198.18.12.0/24
IPV6SUBNET=-
PUBLIC_IP=192.0.2.23
PUBLIC_IPV6=-
stdin:

end
== del
NETWORK=-
SUBNET=198.18.9.0/24
IPV6SUBNET=-
PUBLIC_IP=192.0.2.20
PUBLIC_IPV6=-
stdin:
peer data
end
`
	if got := readLog(t, dir); got != want {
		t.Errorf("commands ran as\n%s\nwant\n%s", got, want)
	}
}

// TestExtensionFailures: a failing PreStartupCommand or PostStartupCommand is an error
// naming the command and its output (weftd stops, as flanneld does); a failing
// SubnetAddCommand is logged and the next event still runs.
func TestExtensionFailures(t *testing.T) {
	dir := t.TempDir()
	fail := recorder(t, dir, "fail", "out", "boom", 3)
	ctx := context.Background()

	be, err := New(extensionConfig(t, map[string]string{"PreStartupCommand": fail}), extTestIface, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := be.BackendData(ctx); err == nil || !strings.Contains(err.Error(), "PreStartupCommand") ||
		!strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "outboom") {
		t.Errorf("failing PreStartupCommand: %v", err)
	}

	be, err = New(extensionConfig(t, map[string]string{"PostStartupCommand": fail}), extTestIface, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Register(ctx, lease.Lease{Subnet: netip.MustParsePrefix("198.18.7.0/24")}); err == nil ||
		!strings.Contains(err.Error(), "PostStartupCommand") {
		t.Errorf("failing PostStartupCommand: %v", err)
	}

	be, err = New(extensionConfig(t, map[string]string{"SubnetAddCommand": fail + " $SUBNET", "PostStartupCommand": "/nonexistent/x"}),
		extTestIface, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Register(ctx, lease.Lease{}); err == nil {
		t.Error("PostStartupCommand naming a missing program: no error")
	}
	be.HandleEvents(ctx, []lease.Event{
		{Type: lease.Added, Lease: peerLease("198.18.9.0/24", "192.0.2.20", "extension", "")},
		{Type: lease.Added, Lease: peerLease("198.18.10.0/24", "192.0.2.21", "extension", "")},
	})
	if got := strings.Count(readLog(t, dir), "== fail\n"); got != 4 {
		t.Errorf("fail ran %d times, want 4 (pre, post, two adds)", got)
	}
}

// TestExtensionCancel: a command still running when ctx ends is killed, so weftd's
// shutdown does not wait for it.
func TestExtensionCancel(t *testing.T) {
	testenv.NeedTools(t, "sh", "sleep", "touch")
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	script := filepath.Join(dir, "hang")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+started+"\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	be, err := New(extensionConfig(t, map[string]string{"SubnetAddCommand": script}), extTestIface, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		be.HandleEvents(ctx, []lease.Event{{Type: lease.Added, Lease: peerLease("198.18.9.0/24", "192.0.2.20", "extension", "")}})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command did not start")
		}
		select {
		case <-done:
			t.Fatal("HandleEvents returned before the command started")
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("HandleEvents still waits for the command 10 s after ctx ended")
	}
}

// TestExtensionOptions: the four commands in any case; an unknown key (such as an
// IPv6 form flanneld v0.28.10 does not have) and a command of blanks are refused.
func TestExtensionOptions(t *testing.T) {
	for raw, ok := range map[string]bool{
		`{"type":"extension","subnetaddcommand":"true","PRESTARTUPCOMMAND":"true"}`: true,
		`{"Type":"extension"}`:                             true,
		`{"Type":"extension","SubnetAddCommandV6":"true"}`: false,
		`{"Type":"extension","SubnetAddCommand":"   "}`:    false,
		`{"Type":"extension","SubnetAddCommand":1}`:        false,
	} {
		cfg := testConfig(raw)
		cfg.BackendType = "extension"
		_, err := New(cfg, extTestIface, zap.NewNop())
		if (err == nil) != ok || err != nil && !errors.Is(err, encap.ErrBadOption) {
			t.Errorf("%s: %v", raw, err)
		}
	}
}

// TestExtensionLeaseAddrs: the lease publishes the interface's addresses, whatever
// --public-ip says, as flanneld's extension backend does.
func TestExtensionLeaseAddrs(t *testing.T) {
	ext := encap.ExternalInterface{MTU: 1500, IfaceIP: netip.MustParseAddr("192.0.2.10"),
		PublicIP: netip.MustParseAddr("192.0.2.200")}
	be, err := New(extensionConfig(t, nil), ext, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if v4, v6 := be.(encap.LeaseAddressChooser).LeaseAddrs(); v4 != ext.IfaceIP || v6.IsValid() {
		t.Errorf("LeaseAddrs %v %v, want %v and none", v4, v6, ext.IfaceIP)
	}
	ext.IfaceIPv6, ext.PublicIPv6 = netip.MustParseAddr("2001:db8::10"), netip.MustParseAddr("2001:db8::200")
	be, _ = New(extensionConfig(t, nil), ext, zap.NewNop())
	if _, v6 := be.(encap.LeaseAddressChooser).LeaseAddrs(); v6 != ext.IfaceIPv6 {
		t.Errorf("LeaseAddrs v6 %v, want %v", v6, ext.IfaceIPv6)
	}
}

func testConfig(backend string) *lease.Config {
	return &lease.Config{Network: netip.MustParsePrefix("198.18.0.0/16"), SubnetLen: 24,
		BackendType: "extension", Backend: json.RawMessage(backend)}
}
