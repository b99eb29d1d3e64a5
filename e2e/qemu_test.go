package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/testenv"
)

// qemuARM64 is Debian's qemu-user-static for arm64 (make deps installs it).
const qemuARM64 = "/usr/bin/qemu-aarch64-static"

// TestUDPUnderQEMU runs the arm64 build of weftd ($WEFT_BIN/weftd-arm64, make build)
// under qemu-user on one lab host and the native weftd on the other, on the udp
// backend: pods ping both ways and an iperf3 TCP run completes. It checks that the
// arm64 binary works, not how fast (qemu translates every instruction).
//
// What qemu-user 7.2 (Debian 12) lacks, so what this test cannot cover (see
// docs/compatibility.md, "Other architectures"): a netlink socket of any family but
// NETLINK_ROUTE (and two others weftd does not use) fails with EPROTONOSUPPORT, so
// vishvananda/netlink's bare NewHandle, which also opens XFRM and netfilter sockets,
// fails (weftd opens NETLINK_ROUTE alone) and so does the kernel WireGuard device's
// generic netlink; and qemu translates only the link, address and route messages of
// NETLINK_ROUTE: neighbour and fdb messages (RTM_GETNEIGH, RTM_NEWNEIGH) fail with
// EOPNOTSUPP. The vxlan backend creates flannel.1 under qemu but cannot write a
// peer's neighbour or fdb entry ("list neighbours of device 3: operation not
// supported"), so pods do not reach each other. udp needs only TUN, UDP sockets,
// recvmmsg/sendmmsg, links, addresses and routes.
func TestUDPUnderQEMU(t *testing.T) {
	arm := filepath.Join(binDir(), "weftd-arm64")
	_, err := os.Stat(arm)
	testenv.Need(t, err == nil, arm+" is missing: `make build` builds bin/weftd-arm64 (set WEFT_BIN to that directory)")
	testenv.NeedTools(t, qemuARM64, "iperf3")
	start := time.Now()
	c := newCluster(t, "v3")
	c.putConfig(`{"Network":"198.18.0.0/16","SubnetLen":24,"Backend":{"Type":"udp"}}`)
	native, emulated := c.addHost("a", "lan1"), c.addHost("b", "lan1")
	c.start(native)
	c.run(emulated, lab.DaemonSpec{Binary: arm, Weft: true, Emulator: qemuARM64,
		Args: []string{"--etcd-api=v3", "--healthz-ip=127.0.0.1", "--healthz-port=8475"}})
	// ip netns exec execs the emulator in its place.
	eventually(t, 10*time.Second, func() error {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", emulated.daemon.Pid())); err != nil || exe != qemuARM64 {
			return fmt.Errorf("the arm64 weftd runs as %q (%v), want under %s", exe, err, qemuARM64)
		}
		return nil
	})

	ctx := context.Background()
	envs := map[*host]string{}
	for _, h := range []*host{native, emulated} {
		env, err := h.daemon.WaitSubnetEnv(ctx, 60*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", h.name, err)
		}
		envs[h] = c.attachPod(h, env)
	}
	t.Logf("both leases and pods in %v", time.Since(start).Round(time.Millisecond))
	for _, p := range [][2]*host{{native, emulated}, {emulated, native}} {
		from, to := p[0], p[1]
		eventually(t, 30*time.Second, func() error {
			out, err := from.pod.Run(ctx, "ping", "-c", "1", "-W", "2", envs[to])
			if err != nil {
				return fmt.Errorf("ping %s -> %s: %v: %s", from.name, to.name, err, out)
			}
			return nil
		})
	}
	before, err := udpStats(emulated)
	if err != nil {
		t.Fatal(err)
	}
	const seconds = 3
	bps := iperfTCP(t, native.pod, emulated.pod, envs[emulated], seconds)
	after, err := udpStats(emulated)
	if err != nil {
		t.Fatal(err)
	}
	// The stream went through the arm64 weftd: it took at least what iperf3 counted
	// as received (less its first second, for slack) from the wire, and sent the ACKs.
	if rx, want := after.RxBytes-before.RxBytes, uint64(bps/8*(seconds-1)); rx < want || after.TxPackets == before.TxPackets {
		t.Fatalf("the arm64 weftd took %d bytes (want >= %d) and sent %d packets during iperf3",
			rx, want, after.TxPackets-before.TxPackets)
	}
	// Nothing it does on udp is refused by the emulator: no warning, no error.
	for _, line := range strings.Split(emulated.logs(), "\n") {
		if strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) || strings.Contains(line, "panic") {
			t.Errorf("the arm64 weftd under qemu-user logged: %s", line)
		}
	}
	t.Logf("udp, native weftd -> arm64 weftd under qemu-user: iperf3 TCP %.1f Mbit/s; %v in all",
		bps/1e6, time.Since(start).Round(time.Millisecond))
}
