package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/testenv"
	"github.com/weftnet/weft/lease"
)

// sysconfigPrefix is the prefix the CentOS and Fedora flannel rpm's
// /etc/sysconfig/flanneld sets, so that the test shows FLANNEL_ETCD_PREFIX honoured.
const sysconfigPrefix = "/atomic.io/network"

// distroFlanneldUnit is flanneld.service as a distribution ships it: settings from
// /etc/sysconfig/flanneld, flanneld's READY=1 awaited, required by docker.service.
const distroFlanneldUnit = `[Unit]
Description=Flanneld overlay address etcd agent
After=network-online.target
Wants=network-online.target
Before=docker.service

[Service]
Type=notify
EnvironmentFile=/etc/sysconfig/flanneld
ExecStart=/usr/bin/flanneld -etcd-endpoints=${FLANNEL_ETCD_ENDPOINTS} -etcd-prefix=${FLANNEL_ETCD_PREFIX} $FLANNEL_OPTIONS
Restart=on-failure

[Install]
WantedBy=multi-user.target
RequiredBy=docker.service
`

// fakeDocker stands for a container runtime that requires flanneld.service, as the
// rpm's [Install] RequiredBy=docker.service makes it: the switch must not stop it.
const fakeDocker = `[Unit]
Description=a stand-in for docker.service

[Service]
ExecStart=/bin/sleep infinity

[Install]
WantedBy=multi-user.target
`

// TestFlanneldSystemdSwitch switches a host from a distribution's flanneld.service
// (settings in /etc/sysconfig/flanneld, prefix /atomic.io/network, -ip-masq) to weftd
// and back, under Debian's systemd as PID 1 (sdNode), following
// docs/from-flanneld-systemd.md step by step: weftd.service with the drop-in
// deploy/weftd.service.d/flanneld-sysconfig.conf reads the same file unchanged (and the
// drop-in turns each generation of that file into the flags flanneld.service gave).
// Host b runs the upstream flanneld throughout, and its pod pings a pod on a every
// 10 ms while a switches. Each way, on vxlan and on udp: a keeps its subnet and its
// lease key (vxlan: and flannel.1, same MAC and index), the firewall chains change
// hands, docker.service (which requires flanneld.service) keeps running, traffic
// resumes; the pings lost are logged and bounded.
func TestFlanneldSystemdSwitch(t *testing.T) {
	for _, backend := range []string{"vxlan", "udp"} {
		t.Run(backend, func(t *testing.T) { testFlanneldSystemdSwitch(t, backend) })
	}
}

func testFlanneldSystemdSwitch(t *testing.T, backend string) {
	testenv.NeedTools(t, "iptables-save")
	c := newCluster(t, "v3")
	flanneld := flanneldBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.lab.Put(ctx, sysconfigPrefix+"/config", fmt.Sprintf(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":%q}}`, backend)); err != nil {
		t.Fatal(err)
	}
	dev := map[string]string{"vxlan": "flannel.1", "udp": "flannel0"}[backend]
	a, b := c.addHost("a", "lan1"), c.addHost("b", "lan2")
	sd := startSystemd(t, a.ns.Name)
	defer func() {
		if t.Failed() {
			for _, u := range []string{"flanneld.service", "weftd.service"} {
				out, _ := sd.run(context.Background(), "journalctl", "--no-pager", "-n", "40", "-u", u)
				t.Logf("journal of %s:\n%s", u, out)
			}
		}
	}()

	// Host a as a distribution leaves it: flanneld from its rpm, enabled, and a
	// container runtime that requires it.
	sysconfig := fmt.Sprintf(`# Flanneld configuration options
FLANNEL_ETCD_ENDPOINTS="%s"
FLANNEL_ETCD_PREFIX="%s"
FLANNEL_OPTIONS="-iface=eth0 -ip-masq"
`, lab.EtcdEndpoint, sysconfigPrefix)
	sdWrite(t, sd, "/usr/bin/flanneld", readFile(t, flanneld), 0o755)
	sdWrite(t, sd, "/etc/sysconfig/flanneld", []byte(sysconfig), 0o644)
	sdWrite(t, sd, "/usr/lib/systemd/system/flanneld.service", []byte(distroFlanneldUnit), 0o644)
	sdWrite(t, sd, "/etc/systemd/system/docker.service", []byte(fakeDocker), 0o644)
	sd.must("systemctl", "daemon-reload")
	sd.must("systemctl", "start", "basic.target", "network-online.target")
	sd.must("systemctl", "enable", "--now", "flanneld.service") // Type=notify: returns on READY=1
	sd.must("systemctl", "enable", "--now", "docker.service")
	dockerPID := sd.show("docker.service", "MainPID")
	if req := sd.show("docker.service", "Requires"); !strings.Contains(req, "flanneld.service") {
		t.Fatalf("docker.service Requires=%q, want flanneld.service (RequiredBy=)", req)
	}

	envA := sdSubnetEnv(t, sd)
	c.startFlanneld(b, nil, "--etcd-prefix="+sysconfigPrefix)
	envB := c.waitSubnetEnv(b)
	podA, _ := c.attachPod(a, envA), c.attachPod(b, envB)
	c.ping(b.pod, podA)
	c.ping(a.pod, envB.Subnet.Addr().String()) // b's flannel.1
	key, mac := ownLease(t, c, a, backend)
	link := linkOf(t, c, a, dev)
	t.Logf("flanneld on a: subnet %v, lease %s, %s %s", envA.Subnet, key, dev, link)
	if !strings.Contains(chains(t, c, a), "FLANNEL-FWD") {
		t.Fatalf("flanneld on a without its FLANNEL-FWD chain:\n%s", chains(t, c, a))
	}

	// weftd's binary, unit and drop-in, installed by the page's commands from a copy
	// of the checkout's files.
	page := string(readFile(t, switchDoc))
	dropIn := readFile(t, filepath.Join("..", "deploy", "weftd.service.d", "flanneld-sysconfig.conf"))
	sdWrite(t, sd, "/root/weft/bin/weftd", readFile(t, c.bin), 0o755)
	sdWrite(t, sd, "/root/weft/deploy/weftd.service", readFile(t, filepath.Join("..", "deploy", "weftd.service")), 0o644)
	sdWrite(t, sd, "/root/weft/deploy/weftd.service.d/flanneld-sysconfig.conf", dropIn, 0o644)
	// First the page's check: weftd takes the config flanneld runs on.
	if out := sdSh(t, sd, "cd /root/weft\n"+pageBlock(t, page, "weft:sysconfig-check-config")); !strings.Contains(out, "accepted") {
		t.Fatalf("weftd check-config on flanneld's settings:\n%s", out)
	}
	sdSh(t, sd, "cd /root/weft\n"+pageBlock(t, page, "weft:sysconfig-install"))
	checkDropInArgs(t, sd, string(dropIn))

	// The switch to weftd, under pings from b's pod to a's.
	p := startPingLog(t, b.pod, podA, 10*time.Millisecond)
	awaitReplies(t, p, 50)
	start := time.Now()
	// disable first (disable --now): flanneld.service stopped while docker.service
	// requires it stops docker.service too (systemctl stop alone does).
	sdSh(t, sd, pageBlock(t, page, "weft:sysconfig-switch"))
	active := time.Since(start)
	awaitReplies(t, p, 100)
	p.finish(t)
	lost, gap := pingLoss(p.out.String())
	t.Logf("flanneld -> weftd: weftd.service active %v after systemctl disable; %d pings every 10 ms, %d lost, longest gap %v",
		active.Round(time.Millisecond), p.sent, lost, gap)
	checkSwitch(t, c, sd, a, "weftd", backend, envA, key, mac, link, lost, maxLost(backend, active))
	// The page's checks show what it says they show.
	if backend == "vxlan" {
		out := sdSh(t, sd, pageBlock(t, page, "weft:sysconfig-check"))
		for _, want := range []string{"active (running)", "FLANNEL_SUBNET=" + envA.Subnet.Addr().Next().String(),
			"reusing our lease", strings.Fields(link)[1], ":WEFT-FWD"} {
			if !strings.Contains(out, want) {
				t.Errorf("the page's checks do not show %q:\n%s", want, out)
			}
		}
	}
	if j := sd.must("journalctl", "--no-pager", "-o", "cat", "-u", "weftd.service"); !strings.Contains(j, "reusing our lease") {
		t.Errorf("weftd did not find its lease by its public IP (no \"reusing our lease\"):\n%s", j)
	}
	if ch := chains(t, c, a); strings.Contains(ch, "FLANNEL-") || !strings.Contains(ch, "WEFT-FWD") || !strings.Contains(ch, "WEFT-POSTRTG") {
		t.Errorf("after the switch to weftd: want weft's chains (FWD, POSTRTG: -ip-masq from FLANNEL_OPTIONS) and none of flanneld's:\n%s", ch)
	}
	checkDocker(t, sd, dockerPID)
	c.ping(a.pod, envB.Subnet.Addr().String())

	// And back to flanneld, then weft's firewall rules removed.
	p = startPingLog(t, b.pod, podA, 10*time.Millisecond)
	awaitReplies(t, p, 50)
	start = time.Now()
	back := strings.SplitAfter(pageBlock(t, page, "weft:sysconfig-back"), "\n")
	if len(back) != 5 || !strings.Contains(back[1], "ip link delete flannel0") || !strings.Contains(back[3], "cleanup --firewall-only") {
		t.Fatalf("%s: the way back is not disable weftd, delete flannel0, enable flanneld, weftd cleanup --firewall-only: %q", switchDoc, back)
	}
	sdSh(t, sd, back[0]+back[1]+back[2])
	active = time.Since(start)
	if !strings.Contains(chains(t, c, a), "WEFT-FWD") {
		t.Fatalf("weft's rules gone before weftd cleanup ran: the check below would prove nothing")
	}
	sdSh(t, sd, back[3]) // weftd cleanup --firewall-only: the chains are checked below
	if j := sd.must("journalctl", "--no-pager", "-o", "cat", "-u", "flanneld.service"); strings.Count(j, "for current IP") != 1 {
		t.Errorf("flanneld did not find weftd's lease by its public IP on the way back (one \"Found lease ... for current IP\"):\n%s", j)
	}
	awaitReplies(t, p, 100)
	p.finish(t)
	lost, gap = pingLoss(p.out.String())
	t.Logf("weftd -> flanneld: flanneld.service active %v after systemctl disable; %d pings every 10 ms, %d lost, longest gap %v",
		active.Round(time.Millisecond), p.sent, lost, gap)
	checkSwitch(t, c, sd, a, "flanneld", backend, envA, key, mac, link, lost, maxLost(backend, active))
	if ch := chains(t, c, a); strings.Contains(ch, "WEFT-") || !strings.Contains(ch, "FLANNEL-FWD") || !strings.Contains(ch, "FLANNEL-POSTRTG") {
		t.Errorf("back on flanneld after weftd cleanup --firewall-only: want flanneld's chains and none of weft's:\n%s", ch)
	}
	checkDocker(t, sd, dockerPID)
	if req := sd.show("docker.service", "Requires"); !strings.Contains(req, "flanneld.service") {
		t.Errorf("docker.service Requires=%q after the way back, want flanneld.service again", req)
	}
	c.ping(a.pod, envB.Subnet.Addr().String())
}

// switchDoc is the page whose commands TestFlanneldSystemdSwitch runs.
const switchDoc = "../docs/from-flanneld-systemd.md"

// pageBlock is the fenced block that follows <!-- name --> in page.
func pageBlock(t *testing.T, page, name string) string {
	t.Helper()
	_, rest, ok := strings.Cut(page, "<!-- "+name+" -->\n```sh\n")
	if !ok {
		t.Fatalf("%s: no sh block after <!-- %s -->", switchDoc, name)
	}
	body, _, ok := strings.Cut(rest, "```\n")
	if !ok {
		t.Fatalf("%s: block %s not closed", switchDoc, name)
	}
	return body
}

// sdSh runs a shell script inside systemd's namespaces and fails the test when it fails.
func sdSh(t *testing.T, sd *sdNode, script string) string {
	t.Helper()
	return sd.must("sh", "-ec", script)
}

// maxLost bounds the pings (10 ms apart) lost in a switch whose commands ran for took.
// vxlan: the kernel keeps forwarding over flannel.1 while neither daemon runs, so a
// switch should lose none; 50 leaves room for a slow machine, not for a broken data
// path (flannel.1 made again with another MAC lost 118 in a trial: the peer has to
// read the new VtepMAC). udp: nothing reads flannel0 (weftd's persistent TUN, or
// flanneld's, which goes with it) from the old daemon's exit until the new one reads
// its TUN, before it is active: at most the pings of the commands' time, and 50 more.
func maxLost(backend string, took time.Duration) int {
	if backend == "vxlan" {
		return 50
	}
	return int(took/(10*time.Millisecond)) + 50
}

// checkSwitch checks a after a switch to daemon: the unit active, the same subnet in
// subnet.env, the same lease key with a's PublicIP (and VtepMAC), flannel.1 adopted
// (same MAC and index; udp's flannel0 is made anew), and at most bound pings lost (maxLost).
func checkSwitch(t *testing.T, c *cluster, sd *sdNode, a *host, daemon, backend string, env lease.SubnetEnv, key, mac, link string, lost, bound int) {
	t.Helper()
	if st := sd.show(daemon+".service", "ActiveState"); st != "active" {
		t.Errorf("%s.service %s", daemon, st)
	}
	if got := sdSubnetEnv(t, sd); got.Subnet != env.Subnet || got.Network != env.Network || got.MTU != env.MTU {
		t.Errorf("on %s: subnet.env %+v, was %+v", daemon, got, env)
	}
	if k, m := ownLease(t, c, a, backend); k != key || m != mac {
		t.Errorf("on %s: lease %s VtepMAC %s, was %s %s", daemon, k, m, key, mac)
	}
	if backend == "vxlan" {
		if l := linkOf(t, c, a, "flannel.1"); l != link {
			t.Errorf("on %s: flannel.1 %s, was %s (made again instead of adopted)", daemon, l, link)
		}
	}
	if lost > bound {
		t.Errorf("switch to %s: %d pings lost, want at most %d", daemon, lost, bound)
	}
}

// checkDocker fails the test when the stand-in for docker.service was stopped or
// restarted by the switch.
func checkDocker(t *testing.T, sd *sdNode, pid string) {
	t.Helper()
	if st, now := sd.show("docker.service", "ActiveState"), sd.show("docker.service", "MainPID"); st != "active" || now != pid {
		t.Errorf("docker.service %s with MainPID %s (was %s): the switch stopped it", st, now, pid)
	}
}

// awaitReplies waits for n more replies to p.
func awaitReplies(t *testing.T, p *pingLog, n int) {
	t.Helper()
	have := len(replyTimes(p.out.String()))
	eventually(t, 30*time.Second, func() error {
		if got := len(replyTimes(p.out.String())) - have; got < n {
			return fmt.Errorf("%d of %d ping replies", got, n)
		}
		return nil
	})
}

// pingLoss counts the pings without a reply among those up to the last answered one
// (the one in flight when ping was stopped is not lost) and the longest run of them.
func pingLoss(out string) (lost int, gap time.Duration) {
	seen, last := map[int]bool{}, 0
	for _, line := range strings.Split(out, "\n") {
		if i := strings.Index(line, "icmp_seq="); i >= 0 && strings.Contains(line, "bytes from") {
			var seq int
			if _, err := fmt.Sscanf(line[i:], "icmp_seq=%d", &seq); err == nil {
				seen[seq], last = true, max(last, seq)
			}
		}
	}
	run, longest := 0, 0
	for seq := 1; seq <= last; seq++ {
		if seen[seq] {
			run = 0
			continue
		}
		lost++
		run++
		longest = max(longest, run)
	}
	return lost, time.Duration(longest) * 10 * time.Millisecond
}

// ownLease is a's lease under sysconfigPrefix: its key and VtepMAC (vxlan).
func ownLease(t *testing.T, c *cluster, a *host, backend string) (key, mac string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.etcdClient().Get(ctx, sysconfigPrefix+"/subnets/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		var v struct {
			PublicIP    string
			BackendType string
			BackendData struct{ VtepMAC string }
		}
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			t.Fatalf("lease %s: %v", kv.Key, err)
		}
		if v.PublicIP == a.ip {
			if key != "" {
				t.Fatalf("two leases for %s: %s and %s", a.ip, key, kv.Key)
			}
			// flanneld's udp leases carry no BackendType.
			if (v.BackendType != backend && (backend != "udp" || v.BackendType != "")) || (backend == "vxlan") != (v.BackendData.VtepMAC != "") {
				t.Fatalf("lease %s: %s", kv.Key, kv.Value)
			}
			key, mac = string(kv.Key), v.BackendData.VtepMAC
		}
	}
	if key == "" {
		t.Fatalf("no lease for %s under %s", a.ip, sysconfigPrefix)
	}
	return key, mac
}

// linkOf is a device's index and MAC (link/none for a TUN).
func linkOf(t *testing.T, c *cluster, h *host, dev string) string {
	t.Helper()
	f := strings.Fields(c.sh(h.ns, "ip -o link show dev "+dev))
	for i, w := range f {
		if w == "link/none" {
			return strings.TrimSuffix(f[0], ":") + " " + w
		}
		if w == "link/ether" && i+1 < len(f) {
			return strings.TrimSuffix(f[0], ":") + " " + f[i+1]
		}
	}
	t.Fatalf("%s on %s: %v", dev, h.name, f)
	return ""
}

// chains lists the iptables chains of both backends (nat and filter) on h.
func chains(t *testing.T, c *cluster, h *host) string {
	t.Helper()
	var out []string
	for _, save := range []string{"iptables-legacy-save", "iptables-nft-save"} {
		s, err := h.ns.Run(context.Background(), save)
		if err != nil {
			continue // a backend the machine lacks
		}
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, ":") {
				out = append(out, save+" "+strings.Fields(l)[0])
			}
		}
	}
	return strings.Join(out, "\n")
}

// sdSubnetEnv is the subnet.env in systemd's /run (the node's own).
func sdSubnetEnv(t *testing.T, sd *sdNode) lease.SubnetEnv {
	t.Helper()
	env, err := lease.ReadSubnetEnv(sd.root("/run/flannel/subnet.env"))
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// sdWrite writes a file into systemd's root (an overlay of its own).
func sdWrite(t *testing.T, sd *sdNode, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(sd.root(path)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sd.root(path), data, mode); err != nil {
		t.Fatal(err)
	}
}

// checkDropInArgs runs the drop-in's ExecStart under systemd, with weftd replaced by a
// script that records its arguments, for the settings of each generation of
// /etc/sysconfig/flanneld: the flags weftd would get.
func checkDropInArgs(t *testing.T, sd *sdNode, dropIn string) {
	t.Helper()
	probe := strings.NewReplacer("/usr/local/bin/weftd", "/usr/local/bin/weft-argv",
		"EnvironmentFile=/etc/sysconfig/flanneld", "EnvironmentFile=/etc/sysconfig/flanneld-probe").Replace(dropIn)
	sdWrite(t, sd, "/usr/local/bin/weft-argv", []byte("#!/bin/sh\nfor a; do printf '%s\\n' \"$a\"; done >/run/weft-argv\n"), 0o755)
	sdWrite(t, sd, "/etc/systemd/system/weft-argv.service", []byte("[Service]\nType=oneshot\nExecStart=/bin/false\n"), 0o644)
	sdWrite(t, sd, "/etc/systemd/system/weft-argv.service.d/probe.conf", []byte(probe), 0o644)
	sd.must("systemctl", "daemon-reload")
	for _, tc := range []struct{ name, file, want string }{
		{"FLANNEL_ETCD_ENDPOINTS, FLANNEL_ETCD_PREFIX",
			`FLANNEL_ETCD_ENDPOINTS="http://192.0.2.1:2379,http://192.0.2.2:2379"` + "\nFLANNEL_ETCD_PREFIX=\"/atomic.io/network\"\nFLANNEL_OPTIONS=\"-iface=eth0  -ip-masq\"\n",
			"-etcd-endpoints=http://192.0.2.1:2379,http://192.0.2.2:2379 -etcd-prefix=/atomic.io/network -iface=eth0 -ip-masq"},
		{"FLANNEL_ETCD, FLANNEL_ETCD_KEY (older packages)",
			"FLANNEL_ETCD=\"http://192.0.2.1:2379\"\nFLANNEL_ETCD_KEY=\"/coreos.com/network\"\n",
			"-etcd-endpoints=http://192.0.2.1:2379 -etcd-prefix=/coreos.com/network"},
		{"FLANNEL_OPTIONS alone",
			"FLANNEL_ETCD_PREFIX=\nFLANNEL_OPTIONS=\"--etcd-endpoints=http://192.0.2.1:2379 -iface-regex=^eth[0-9]$\"\n",
			"--etcd-endpoints=http://192.0.2.1:2379 -iface-regex=^eth[0-9]$"},
	} {
		sdWrite(t, sd, "/etc/sysconfig/flanneld-probe", []byte(tc.file), 0o644)
		sd.must("systemctl", "start", "weft-argv.service")
		// One line per argument: an empty one or one holding a space would show.
		got := strings.Split(strings.TrimSuffix(string(readFile(t, sd.root("/run/weft-argv"))), "\n"), "\n")
		if strings.Join(got, "|") != strings.Join(strings.Fields(tc.want), "|") {
			t.Errorf("the drop-in with %s gives weftd %q, want %q", tc.name, got, tc.want)
		}
	}
	sd.must("systemctl", "disable", "--now", "weft-argv.service")
}
