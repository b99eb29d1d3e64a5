package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/bench"
	"github.com/weftnet/weft/bench/lab"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
)

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"lab"}, 2, "lab up|down|status"},
		{[]string{"lab", "sideways"}, 2, "sideways"},
		{[]string{"lab", "up", "--backend", "carrier-pigeon"}, 2, "unknown backend"},
		{[]string{"lab", "up", "--hosts", "0", "--lan2", "0"}, 2, "1 to 20 hosts"},
		{[]string{"run", "--subjects", "nope"}, 2, "unknown subject"},
		{[]string{"run", "--daemon", "noequals"}, 2, "NAME=PATH"},
		{[]string{"run", "extra"}, 2, "no arguments"},
		{[]string{"run", "--family", "5"}, 2, "want 4 or 6"},
		{[]string{"run", "--subjects", "weftd-udp", "--weftd", "/nonexistent/weftd"}, 1, "weftd not found"},
		{[]string{"help"}, 0, "usage"},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.want) {
			t.Errorf("%v: code %d, output %q; want code %d with %q", tc.args, code, out.String()+errb.String(), tc.code, tc.want)
		}
	}
}

func TestPick(t *testing.T) {
	all := bench.Subjects("/bin/weftd", [][2]string{{"flanneld", "/opt/flanneld"}})
	got, err := pick(all, "flanneld, underlay")
	if err != nil || len(got) != 2 || got[0].Name != "flanneld" || got[0].Binary != "/opt/flanneld" ||
		got[0].Backend != "udp" || got[1].Name != bench.Underlay {
		t.Errorf("pick: %+v, %v", got, err)
	}
	if got, _ := pick(all, ""); len(got) != 11 {
		t.Errorf("all subjects: %d", len(got))
	}
	if _, err := pick(all, "underlay,x"); !errors.Is(err, errUsage) {
		t.Errorf("unknown subject: %v", err)
	}
	var d daemonFlag
	for _, v := range []string{"a=/x", "b=/y"} {
		if err := d.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"=x", "a=", "a/b=x", "ab"} {
		if err := d.Set(bad); err == nil {
			t.Errorf("--daemon %q accepted", bad)
		}
	}
	if len(d) != 2 || d[1] != [2]string{"b", "/y"} {
		t.Errorf("daemons %v", d)
	}
}

func TestLabFlagsSpec(t *testing.T) {
	o, err := parseLabFlags([]string{"--hosts", "2", "--lan2", "1", "--backend", "none"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	s := o.spec("/tmp/x.json")
	if len(s.Hosts) != 3 || s.Hosts[0] != (lab.HostSpec{Name: "a", LAN: lab.LAN1}) ||
		s.Hosts[2] != (lab.HostSpec{Name: "c", LAN: lab.LAN2}) || s.StateFile != "/tmp/x.json" {
		t.Errorf("spec %+v", s)
	}
}

// TestLabUpStatusDown drives the built binary: lab up with weftd udp leaves a lab
// running after the command returns, its pods ping each other, status shows it and
// down removes every namespace.
func TestLabUpStatusDown(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e")
	}
	testenv.NeedRoot(t)
	testenv.NeedTools(t, "ip", "etcd", "ping")
	bin := os.Getenv("WEFT_BIN")
	wb, wd := filepath.Join(bin, "weft-bench"), filepath.Join(bin, "weftd")
	_, e1 := os.Stat(wb)
	_, e2 := os.Stat(wd)
	testenv.Need(t, bin != "" && e1 == nil && e2 == nil, "WEFT_BIN=<dir> with weft-bench and weftd (make build)")
	dir := t.TempDir()
	state := filepath.Join(dir, "lab.json")
	testenv.OnInterrupt(t, "bench lab", func() error { return lab.Down(state) })
	t.Cleanup(func() { _ = lab.Down(state) })
	cmd := func(args ...string) string {
		t.Helper()
		c := exec.Command(wb, args...)
		c.Env = append(os.Environ(), "WEFT_BENCH_STATE_DIR="+dir)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("weft-bench %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := cmd("lab", "up", "--hosts", "2", "--lan2", "0", "--backend", "udp", "--weftd", wd)
	if !strings.Contains(out, "running") {
		t.Errorf("lab up output:\n%s", out)
	}
	s, err := lab.ReadState(state)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Hosts) != 2 || s.Hosts[0].PodNS == "" || s.Hosts[1].PodAddr == "" || s.Hosts[0].Subnet == "" {
		t.Fatalf("state %+v", s)
	}
	pod := &netns.NS{Name: s.Hosts[0].PodNS}
	if _, err := pod.Run(context.Background(), "ping", "-c1", "-W2", s.Hosts[1].PodAddr); err != nil {
		t.Errorf("pod a -> pod b: %v", err)
	}
	status := cmd("lab", "status")
	if !strings.Contains(status, s.Hosts[1].PodAddr) || !strings.Contains(status, "running") {
		t.Errorf("status:\n%s", status)
	}
	// The try: line's `weftd peers` answers from host a: b's subnet, up once probed.
	try := fmt.Sprintf("ip netns exec %s bin/weftd peers --healthz-port=%d", s.Hosts[0].NS, labHealthzPort)
	if !strings.Contains(status, try) {
		t.Errorf("status lacks %q:\n%s", try, status)
	}
	host := &netns.NS{Name: s.Hosts[0].NS}
	var peers string
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := host.Run(context.Background(), wd, "peers", fmt.Sprintf("--healthz-port=%d", labHealthzPort))
		peers = out
		if err == nil && strings.Contains(out, s.Hosts[1].Subnet) && strings.Contains(out, " up ") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("weftd peers on host a (%v) never showed %s up:\n%s", err, s.Hosts[1].Subnet, peers)
			break
		}
		time.Sleep(200 * time.Millisecond) // polling the daemon's probes: a condition, awaited
	}
	cmd("lab", "down")
	if left := lab.Leftover(s.Namespaces); len(left) > 0 {
		t.Errorf("left after down: %v", left)
	}
	if out := cmd("lab", "status"); !strings.Contains(out, "no lab is up") {
		t.Errorf("status after down:\n%s", out)
	}
}
