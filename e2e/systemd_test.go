package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/lease"
)

// TestSystemdUnitWireGuard installs deploy/weftd.service, unchanged, into Debian's
// systemd running as PID 1 of namespaces of its own (sdNode) on lab host a, whose
// kernel has no WireGuard module, with Backend wireguard in the lab's etcd, and
// weftd on host b as its peer. It checks what the unit promises: READY (active, with
// weftd's status line), the watchdog armed, the userspace device up with its UAPI
// socket in /run/wireguard (wg show works), pods on a and b pinging over it, a
// restart after SIGKILL with a new MainPID, ProtectSystem=strict enforced in weftd's
// mount namespace, and weftd's writes only in /run/flannel, /run/wireguard and
// /var/lib/weft. Then docs/operations.md's uninstall steps for a systemd host run as
// written, and leave nothing of weft on a, nor its lease in etcd.
func TestSystemdUnitWireGuard(t *testing.T) {
	c := wgCluster(t)
	a, b := c.addHost("a", "lan1"), c.addHost("b", "lan2")
	startWG(c, b)
	sd := startSystemd(t, a.ns.Name)
	installUnit(t, sd, c.bin)
	// What weftd.service pulls in (sysinit.target's units write utmp, /etc/mtab and
	// the like) runs first, so that the files compared below change for weftd alone.
	sd.must("systemctl", "start", "basic.target", "network-online.target")
	before := sd.files()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	sd.must("systemctl", "start", "--no-block", "weftd.service")
	awaitActive(t, ctx, sd, 0)
	t.Logf("weftd.service active (READY=1) %v after systemctl start", time.Since(start).Round(time.Millisecond))
	defer func() {
		if t.Failed() {
			out, _ := sd.run(context.Background(), "journalctl", "--no-pager", "-n", "60", "-u", "weftd.service")
			t.Logf("journal of weftd.service:\n%s", out)
		}
	}()
	if st := sd.show("weftd.service", "StatusText"); !strings.HasPrefix(st, "leased 198.18.") || !strings.HasSuffix(st, "wireguard backend") {
		t.Errorf("StatusText %q, want weftd's READY status (leased <subnet>, wireguard backend)", st)
	}
	if w := sd.show("weftd.service", "WatchdogUSec"); w != "30s" {
		t.Errorf("WatchdogUSec %q, want 30s", w)
	}
	journal := sd.must("journalctl", "--no-pager", "-o", "cat", "-u", "weftd.service")
	for _, want := range []string{"pinging the systemd watchdog", "running the device in userspace"} {
		if !strings.Contains(journal, want) {
			t.Errorf("weftd's journal lacks %q", want)
		}
	}

	// The userspace device: a TUN in a's namespace, its UAPI socket where wg looks.
	if link := c.sh(a.ns, "ip -d -o link show dev flannel-wg"); !strings.Contains(link, " tun ") || !strings.Contains(link, ",UP") {
		t.Fatalf("flannel-wg on a: %q, want a TUN device, up", link)
	}
	keyB, _ := wgLeaseData(c, b)
	if wg := sd.must("wg", "show", "flannel-wg"); !strings.Contains(wg, "listening port: 51820") || !strings.Contains(wg, "peer: "+keyB) {
		t.Fatalf("wg show flannel-wg under systemd:\n%s\nwant port 51820 and peer %s", wg, keyB)
	}
	envA, err := lease.ReadSubnetEnv(sd.root("/run/flannel/subnet.env"))
	if err != nil {
		t.Fatal(err)
	}
	podA, podB := c.attachPod(a, envA), c.attachPod(b, c.waitSubnetEnv(b))
	c.ping(a.pod, podB)
	c.ping(b.pod, podA)

	checkSandbox(t, sd)

	old := sd.show("weftd.service", "MainPID")
	sd.must("systemctl", "kill", "-s", "KILL", "weftd.service")
	killed := time.Now()
	pid := awaitActive(t, ctx, sd, 1)
	if strconv.Itoa(pid) == old {
		t.Fatalf("MainPID %d after SIGKILL, the same as before", pid)
	}
	t.Logf("after SIGKILL: active again with MainPID %d (was %s), %v later (RestartSec=5s)", pid, old, time.Since(killed).Round(time.Millisecond))
	c.ping(a.pod, podB)

	checkWrites(t, before, sd.files())

	sd.must("systemctl", "stop", "weftd.service")
	// The device stays for the next weftd (`weftd cleanup` removes it).
	if out, err := a.ns.Run(context.Background(), "ip", "addr", "show", "flannel-wg"); err != nil || !strings.Contains(out, "inet ") {
		t.Errorf("flannel-wg not left with its address after systemctl stop: %v %s", err, out)
	}
	if _, err := os.Stat(sd.root("/run/wireguard/flannel-wg.sock")); !os.IsNotExist(err) {
		t.Errorf("UAPI socket left after systemctl stop: %v", err)
	}

	// docs/operations.md's uninstall steps for a systemd host, as written, under this
	// systemd: nothing of weft is left on a, and its lease is gone from etcd.
	ops, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	steps := docBlock(t, string(ops), "weft:systemd-uninstall")
	if out, err := sd.run(ctx, "sh", "-ec", steps); err != nil {
		t.Fatalf("operations.md's uninstall steps: %v\n%s", err, out)
	}
	if out, err := sd.run(ctx, "systemctl", "cat", "weftd.service"); err == nil {
		t.Errorf("weftd.service still known to systemd after the uninstall steps:\n%s", out)
	}
	for _, gone := range []string{"/usr/local/bin/weftd", "/etc/default/weftd", "/etc/systemd/system/weftd.service",
		"/run/flannel/subnet.env", "/run/flannel/wgkey", "/run/flannel/weft-ways.json", "/run/flannel/weft-relayed.json", "/var/lib/weft/lease.json"} {
		if _, err := os.Lstat(sd.root(gone)); !os.IsNotExist(err) {
			t.Errorf("%s left after the uninstall steps (%v)", gone, err)
		}
	}
	if out, err := a.ns.Run(context.Background(), "ip", "-o", "link", "show"); err != nil || strings.Contains(out, "flannel") {
		t.Errorf("a's links after the uninstall steps (%v):\n%s", err, out)
	}
	if rules, nft := weftRules(c, a); len(rules) > 0 || nft {
		t.Errorf("weft's rules left on a after the uninstall steps: %q (nft table: %v)", rules, nft)
	}
	key := lease.DefaultPrefix + "/subnets/" + strings.Replace(envA.Subnet.Masked().String(), "/", "-", 1)
	if got, err := c.etcdClient().Get(ctx, key); err != nil || got.Count != 0 {
		t.Errorf("a's lease %s after the uninstall steps: %v (%v)", key, got, err)
	}
}

// installUnit puts weftd, deploy/weftd.service and an environment file for the lab
// (etcd, eth0, --ip-masq) into systemd's root, and reloads systemd.
func installUnit(t *testing.T, sd *sdNode, weftd string) {
	t.Helper()
	bin, err := os.ReadFile(weftd)
	if err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile(filepath.Join("..", "deploy", "weftd.service"))
	if err != nil {
		t.Fatal(err)
	}
	env := fmt.Sprintf("FLANNELD_ETCD_ENDPOINTS=%s\nFLANNELD_IFACE=eth0\nFLANNELD_IP_MASQ=true\n", lab.EtcdEndpoint)
	for path, f := range map[string]struct {
		data []byte
		mode os.FileMode
	}{
		"/usr/local/bin/weftd":              {bin, 0o755},
		"/etc/systemd/system/weftd.service": {unit, 0o644},
		"/etc/default/weftd":                {[]byte(env), 0o644},
	} {
		if err := os.MkdirAll(filepath.Dir(sd.root(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sd.root(path), f.data, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	sd.must("systemctl", "daemon-reload")
}

// awaitActive waits until weftd.service is active after restarts restarts, and
// returns its MainPID. Type=notify: active means weftd sent READY=1.
func awaitActive(t *testing.T, ctx context.Context, sd *sdNode, restarts int) int {
	t.Helper()
	var last string
	for {
		out, err := sd.run(ctx, "systemctl", "show", "-p", "ActiveState,SubState,MainPID,NRestarts", "weftd.service")
		last = strings.TrimSpace(out)
		p := map[string]string{}
		for _, l := range strings.Split(last, "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				p[k] = v
			}
		}
		pid, _ := strconv.Atoi(p["MainPID"])
		if err == nil && p["ActiveState"] == "active" && p["SubState"] == "running" && pid > 0 && p["NRestarts"] == strconv.Itoa(restarts) {
			return pid
		}
		n, _ := strconv.Atoi(p["NRestarts"])
		if p["ActiveState"] == "failed" || n > restarts || ctx.Err() != nil {
			t.Fatalf("weftd.service not active after %d restarts: %v\n%s", restarts, err, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // systemd has no event for this here
		}
	}
}

// checkSandbox writes from inside weftd's own mount namespace (nsenter into MainPID):
// ProtectSystem=strict makes /etc, /usr, /var/lib and /run read-only to it, while
// /run/flannel, /run/wireguard and /var/lib/weft stay writable.
func checkSandbox(t *testing.T, sd *sdNode) {
	t.Helper()
	pid := sd.show("weftd.service", "MainPID")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, dir := range []string{"/etc", "/usr/local/bin", "/var/lib", "/run", "/opt"} {
		out, err := sd.run(ctx, "nsenter", "-t", pid, "-m", "-r", "touch", dir+"/weft-probe")
		if err == nil || !strings.Contains(out, "Read-only file system") {
			t.Errorf("weftd may write %s (ProtectSystem=strict): %v %s", dir, err, out)
		}
	}
	for _, dir := range []string{"/run/flannel", "/run/wireguard", "/var/lib/weft"} {
		if out, err := sd.run(ctx, "nsenter", "-t", pid, "-m", "-r", "sh", "-c", "touch $0/weft-probe && rm $0/weft-probe", dir); err != nil {
			t.Errorf("weftd may not write %s: %v %s", dir, err, out)
		}
	}
	if j := sd.must("journalctl", "--no-pager", "-o", "cat", "-u", "weftd.service"); strings.Contains(j, "read-only file system") {
		t.Errorf("weftd met a read-only file system:\n%s", j)
	}
}

// weftdWrites are where weftd may write; systemdWrites are systemd's own files (its
// state, the journal, the private /tmp it makes for PrivateTmp=).
var (
	weftdWrites   = []string{"/run/flannel/", "/run/wireguard/", "/var/lib/weft/"}
	systemdWrites = []string{"/run/systemd/", "/run/log/journal/", "/var/log/journal/", "/var/lib/systemd/"}
)

// checkWrites fails the test for every file made or changed while weftd ran outside
// the places it may write and systemd's own.
func checkWrites(t *testing.T, before, after map[string]string) {
	t.Helper()
	var weft, bad []string
	for p, v := range after {
		if before[p] == v {
			continue
		}
		switch {
		case hasPrefix(p, weftdWrites):
			weft = append(weft, p)
		case hasPrefix(p, systemdWrites):
		default:
			bad = append(bad, p)
		}
	}
	sort.Strings(weft)
	sort.Strings(bad)
	t.Logf("files weftd made or changed: %v", weft)
	if len(weft) == 0 {
		t.Errorf("no file made in %v: the check sees nothing", weftdWrites)
	}
	if len(bad) > 0 {
		t.Errorf("written outside %v while weftd ran: %v", weftdWrites, bad)
	}
}

func hasPrefix(p string, prefixes []string) bool {
	for _, pre := range prefixes {
		if strings.HasPrefix(p, pre) {
			return true
		}
	}
	return false
}
