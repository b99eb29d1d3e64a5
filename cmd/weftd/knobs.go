package main

import (
	"fmt"
	"strconv"
	"time"

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
	set func(t *factory.Tuning, v string) error
}

// knobs are weftd's WEFT_* variables.
var knobs = []knob{
	{"WEFT_UDP_BATCH", "udp: most packets moved per system call (1-" + strconv.Itoa(proxy.MaxBatch) + "; 0 is the default)",
		"`" + strconv.Itoa(proxy.DefaultBatch) + "`", func(t *factory.Tuning, v string) error {
			n, err := strconv.Atoi(v)
			if err == nil {
				err = proxy.CheckBatch(n)
			}
			t.UDP.Batch = n
			return err
		}},
	{"WEFT_UDP_SOCKBUF", "udp: bytes asked for each socket's send and receive buffers; negative keeps the kernel's",
		"`" + strconv.Itoa(proxy.DefaultSocketBuffer) + "` (8 MiB)", func(t *factory.Tuning, v string) (err error) {
			t.UDP.SocketBuffer, err = strconv.Atoi(v)
			return err
		}},
	{"WEFT_UDP_BUSY_POLL", "udp: busy poll window (a duration such as 200us, at most " + proxy.MaxBusyPoll.String() +
		"); replaces the network config's Backend.BusyPoll, 0 turns it off", "the config's `BusyPoll` (off)",
		func(t *factory.Tuning, v string) error {
			d, err := time.ParseDuration(v)
			if err == nil {
				err = proxy.CheckBusyPoll(d)
			}
			t.UDP.BusyPoll = &d
			return err
		}},
	{"WEFT_UDP_NO_REUSEPORT", "udp: true gives up SO_REUSEPORT (and so more than one worker)", "`false`",
		boolKnob(func(t *factory.Tuning) *bool { return &t.UDP.NoReusePort })},
	{"WEFT_UDP_NO_MMSG", "udp: true moves one packet per sendmsg/recvmsg instead of sendmmsg/recvmmsg", "`false`",
		boolKnob(func(t *factory.Tuning) *bool { return &t.UDP.NoMmsg })},
	{"WEFT_UDP_NO_GSO", "udp: true gives up UDP GSO (UDP_SEGMENT)", "`false`",
		boolKnob(func(t *factory.Tuning) *bool { return &t.UDP.NoGSO })},
	{"WEFT_UDP_NO_GRO", "udp: true gives up UDP GRO on the sockets", "`false`",
		boolKnob(func(t *factory.Tuning) *bool { return &t.UDP.NoGRO })},
	{"WEFT_TUN_OFFLOAD", "udp: false opens flannel0 without TUN offloads (virtio-net header, TSO)", "`true`",
		func(t *factory.Tuning, v string) error {
			on, err := strconv.ParseBool(v)
			t.UDP.NoTUNOffload = !on
			return err
		}},
	{"WEFT_TUN_NO_USO", "udp: true opens flannel0 without UDP segmentation offload (kernel 6.2+; coalesced UDP into flannel0)", "`false`",
		boolKnob(func(t *factory.Tuning) *bool { return &t.UDP.NoTUNUSO })},
	{"WEFT_WG_DEVICE", "wireguard: which device runs: `kernel`, `userspace` (wireguard-go in weftd) or `auto` (the kernel's when it has WireGuard); replaces the network config's Backend.Device",
		"the config's `Device` (`auto`)", func(t *factory.Tuning, v string) error {
			switch v {
			case factory.WireGuardAuto, factory.WireGuardKernel, factory.WireGuardUserspace:
				t.WireGuard.Device = v
				return nil
			}
			return fmt.Errorf("not auto, kernel or userspace")
		}},
	{"WEFT_WG_SOCKET_DIR", "wireguard: directory of the userspace devices' UAPI sockets (`wg` looks in the default)",
		"`" + factory.DefaultWireGuardSocketDir + "`", func(t *factory.Tuning, v string) error {
			t.WireGuard.SocketDir = v
			return nil
		}},
	{"WIREGUARD_KEY_FILE", "wireguard: the private key's file, made once when missing (flanneld's variable)",
		"`" + factory.DefaultWireGuardKeyFile + "`", func(t *factory.Tuning, v string) error {
			t.WireGuard.KeyFile = v
			return nil
		}},
}

func boolKnob(field func(*factory.Tuning) *bool) func(*factory.Tuning, string) error {
	return func(t *factory.Tuning, v string) (err error) {
		*field(t), err = strconv.ParseBool(v)
		return err
	}
}

// parseKnobs reads every WEFT_* variable that is set (non-empty) from env.
func parseKnobs(env func(string) string) (factory.Tuning, error) {
	var t factory.Tuning
	for _, k := range knobs {
		v := env(k.name)
		if v == "" {
			continue
		}
		if err := k.set(&t, v); err != nil {
			return factory.Tuning{}, fmt.Errorf("environment %s=%q: %w", k.name, v, err)
		}
	}
	return t, nil
}
