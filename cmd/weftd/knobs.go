package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/weftnet/weft/daemon"
	"github.com/weftnet/weft/encap/factory"
	"github.com/weftnet/weft/proxy"
)

// knob is one WEFT_* environment variable of weftd. weftd is the only reader of
// them: it parses and checks each here, and hands the result to the backends as plain
// configuration (factory.Tuning). docs/operations.md's table lists the same name, meaning and
// default (TestKnobsDocumented keeps them in step).
type knob struct {
	name    string
	meaning string
	def     string // as docs/operations.md shows it (Markdown)
	// set parses v into t, or says why it cannot.
	set func(t *settings, v string) error
}

// knobs are weftd's WEFT_* variables.
var knobs = []knob{
	{"WEFT_UDP_BATCH", "udp: most packets moved per system call (1-" + strconv.Itoa(proxy.MaxBatch) + "; 0 is the default)",
		"`" + strconv.Itoa(proxy.DefaultBatch) + "`", func(t *settings, v string) error {
			n, err := strconv.Atoi(v)
			if err == nil {
				err = proxy.CheckBatch(n)
			}
			t.UDP.Batch = n
			return err
		}},
	{"WEFT_UDP_SOCKBUF", "udp: bytes asked for each socket's send and receive buffers; negative keeps the kernel's",
		"`" + strconv.Itoa(proxy.DefaultSocketBuffer) + "` (8 MiB)", func(t *settings, v string) (err error) {
			t.UDP.SocketBuffer, err = strconv.Atoi(v)
			return err
		}},
	{"WEFT_UDP_BUSY_POLL", "udp: busy poll window (a duration such as 200us, at most " + proxy.MaxBusyPoll.String() +
		"); replaces the network config's Backend.BusyPoll, 0 turns it off", "the config's `BusyPoll` (off)",
		func(t *settings, v string) error {
			d, err := time.ParseDuration(v)
			if err == nil {
				err = proxy.CheckBusyPoll(d)
			}
			t.UDP.BusyPoll = &d
			return err
		}},
	{"WEFT_UDP_NO_REUSEPORT", "udp: true gives up SO_REUSEPORT (and so more than one worker)", "`false`",
		boolKnob(func(t *settings) *bool { return &t.UDP.NoReusePort })},
	{"WEFT_UDP_NO_MMSG", "udp: true moves one packet per sendmsg/recvmsg instead of sendmmsg/recvmmsg", "`false`",
		boolKnob(func(t *settings) *bool { return &t.UDP.NoMmsg })},
	{"WEFT_UDP_NO_GSO", "udp: true gives up UDP GSO (UDP_SEGMENT)", "`false`",
		boolKnob(func(t *settings) *bool { return &t.UDP.NoGSO })},
	{"WEFT_UDP_NO_GRO", "udp: true gives up UDP GRO on the sockets", "`false`",
		boolKnob(func(t *settings) *bool { return &t.UDP.NoGRO })},
	{"WEFT_TUN_OFFLOAD", "udp: false opens flannel0 without TUN offloads (virtio-net header, TSO)", "`true`",
		func(t *settings, v string) error {
			on, err := strconv.ParseBool(v)
			t.UDP.NoTUNOffload = !on
			return err
		}},
	{"WEFT_TUN_NO_USO", "udp: true opens flannel0 without UDP segmentation offload (kernel 6.2+; coalesced UDP into flannel0)", "`false`",
		boolKnob(func(t *settings) *bool { return &t.UDP.NoTUNUSO })},
	{"WEFT_WG_DEVICE", "wireguard: which device runs: `kernel`, `userspace` (wireguard-go in weftd) or `auto` (the kernel's when it has WireGuard); replaces the network config's Backend.Device",
		"the config's `Device` (`auto`)", func(t *settings, v string) error {
			switch v {
			case factory.WireGuardAuto, factory.WireGuardKernel, factory.WireGuardUserspace:
				t.WireGuard.Device = v
				return nil
			}
			return fmt.Errorf("not auto, kernel or userspace")
		}},
	{"WEFT_WG_SOCKET_DIR", "wireguard: directory of the userspace devices' UAPI sockets (`wg` looks in the default)",
		"`" + factory.DefaultWireGuardSocketDir + "`", func(t *settings, v string) error {
			t.WireGuard.SocketDir = v
			return nil
		}},
	{"WEFT_WG_PATH_PORT", "wireguard: UDP port of the path socket (hellos that tell a host its NAT's address, relayed datagrams, path pings); the same on every host; 0 for none (every peer then direct)",
		"`51822`", func(t *settings, v string) error {
			n, err := strconv.Atoi(v)
			if err == nil && (n < 0 || n > 65535) {
				err = fmt.Errorf("%d: not in 0-65535", n)
			}
			t.WireGuard.PathPort = n
			if n == 0 {
				t.WireGuard.PathPort = -1
			}
			return err
		}},
	{"WEFT_PROBE", "peer probes: false stops probing the peers (GET /peers, `weftd peers`, the node condition and the path MTU repair then have nothing)",
		"`true`", func(t *settings, v string) error {
			on, err := strconv.ParseBool(v)
			t.Probe.Off = !on
			return err
		}},
	{"WEFT_PROBE_INTERVAL", "peer probes: time between two rounds of probes to a peer (100ms-1m); with many peers, rounds are as often as WEFT_PROBE_RATE allows",
		"`2s`", func(t *settings, v string) error {
			d, err := time.ParseDuration(v)
			if err == nil && (d < 100*time.Millisecond || d > time.Minute) {
				err = fmt.Errorf("%v: %w (100ms-1m)", d, errProbeRange)
			}
			t.Probe.Interval = d
			return err
		}},
	{"WEFT_PROBE_RATE", "peer probes: most probe packets sent per second (10-100000)",
		"`130`", func(t *settings, v string) error {
			n, err := strconv.Atoi(v)
			if err == nil && (n < 10 || n > 100000) {
				err = fmt.Errorf("%d: %w (10-100000)", n, errProbeRange)
			}
			t.Probe.Rate = n
			return err
		}},
	{"WIREGUARD_KEY_FILE", "wireguard: the private key's file, made once when missing (flanneld's variable)",
		"`" + factory.DefaultWireGuardKeyFile + "`", func(t *settings, v string) error {
			t.WireGuard.KeyFile = v
			return nil
		}},
}

func boolKnob(field func(*settings) *bool) func(*settings, string) error {
	return func(t *settings, v string) (err error) {
		*field(t), err = strconv.ParseBool(v)
		return err
	}
}

// settings are what the knobs set: the backends' tuning and the peer probes.
type settings struct {
	factory.Tuning
	Probe daemon.Probe
}

// withProbe is the backends' tuning: wireguard chooses its peers' ways on the probes'
// evidence, so without probes it keeps every peer direct.
func (t settings) withProbe() factory.Tuning {
	tu := t.Tuning
	tu.WireGuard.NoPathChoice = t.Probe.Off
	return tu
}

// parseKnobs reads every WEFT_* variable that is set (non-empty) from env.
func parseKnobs(env func(string) string) (settings, error) {
	var t settings
	for _, k := range knobs {
		v := env(k.name)
		if v == "" {
			continue
		}
		if err := k.set(&t, v); err != nil {
			return settings{}, fmt.Errorf("environment %s=%q: %w", k.name, v, err)
		}
	}
	return t, nil
}

// errProbeRange is returned for a probe knob out of its range.
var errProbeRange = errors.New("out of range")
