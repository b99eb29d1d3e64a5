package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftnet/weft/bench/etcdproc"
	"github.com/weftnet/weft/bench/netns"
	"github.com/weftnet/weft/bench/testenv"
)

// plainEtcdIn runs a plain etcd on the loopback of ns (port 2379), with config under
// prefix written through the v3 API's JSON gateway, and returns its endpoint.
func plainEtcdIn(t *testing.T, ns *netns.NS, prefix, config string) string {
	t.Helper()
	testenv.NeedTools(t, "etcd")
	srv, err := etcdproc.Start(context.Background(), etcdproc.Options{Netns: ns.Name})
	if err != nil {
		t.Fatalf("etcd: %v", err)
	}
	t.Cleanup(srv.Close)
	etcdPutV3(t, ns, srv.Endpoint(), prefix+"/config", config)
	return srv.Endpoint()
}

// etcdPutV3 puts key=value through etcd's v3 JSON gateway, from inside ns.
func etcdPutV3(t *testing.T, ns *netns.NS, endpoint, key, value string) {
	t.Helper()
	b64 := base64.StdEncoding.EncodeToString
	body, _ := json.Marshal(map[string]string{"key": b64([]byte(key)), "value": b64([]byte(value))})
	hc := &http.Client{Transport: &http.Transport{DialContext: ns.DialContext}, Timeout: 10 * time.Second}
	resp, err := hc.Post(endpoint+"/v3/kv/put", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("etcd put %s: %v", key, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("etcd put %s: %s", key, resp.Status)
	}
}

// sdMessage is one datagram weftd sent to the notify socket, and when it came.
type sdMessage struct {
	state string
	at    time.Time
	// subnetEnv: whether subnet.env existed when the message arrived.
	subnetEnv bool
}

// TestSystemdNotify runs the real weftd (etcd mode, alloc backend) as systemd would
// for a Type=notify unit with WatchdogSec=: $NOTIFY_SOCKET names a unixgram socket the
// test listens on and $WATCHDOG_USEC is 400 ms. READY=1 must come once, after
// subnet.env exists; WATCHDOG=1 must repeat; SIGTERM must bring STOPPING=1 and a
// clean exit.
func TestSystemdNotify(t *testing.T) {
	ns := hostNS(t) // skips under -short
	const prefix = "/weft-notify/net"
	endpoint := plainEtcdIn(t, ns, prefix, allocConfig)

	dir := t.TempDir()
	sock := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	subnetFile := filepath.Join(dir, "subnet.env")
	msgs := make(chan sdMessage, 256)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			_, statErr := os.Stat(subnetFile)
			msgs <- sdMessage{state: string(buf[:n]), at: time.Now(), subnetEnv: statErr == nil}
		}
	}()

	cmd := exec.Command("ip", "netns", "exec", ns.Name, weftdBinary(t),
		"--etcd-endpoints="+endpoint, "--etcd-prefix="+prefix,
		"--iface=eth0", "--iptables-forward-rules=false",
		"--subnet-file="+subnetFile, "--lease-state-file="+filepath.Join(dir, "lease.json"))
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=400000")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("weftd log:\n%s", log.String())
		}
	})

	next := func(what string) sdMessage {
		t.Helper()
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("notify socket closed while waiting for %s", what)
			}
			return m
		case err := <-exited:
			stopped = true
			t.Fatalf("weftd exited (%v) while we waited for %s", err, what)
		case <-time.After(60 * time.Second):
			t.Fatalf("no %s on the notify socket within 60 s", what)
		}
		return sdMessage{}
	}

	// READY=1 first (watchdog pings may come before it: systemd accepts them).
	var ready sdMessage
	for ready.state == "" {
		m := next("READY=1")
		switch {
		case strings.Contains(m.state, "READY=1"):
			ready = m
		case m.state == "WATCHDOG=1":
		default:
			t.Fatalf("unexpected notify message before READY=1: %q", m.state)
		}
	}
	if !ready.subnetEnv {
		t.Fatalf("READY=1 arrived before %s existed", subnetFile)
	}
	if !strings.Contains(ready.state, "STATUS=leased 198.18.") {
		t.Errorf("READY=1 carries no STATUS naming the lease: %q", ready.state)
	}
	t.Logf("ready: %q", ready.state)

	// The watchdog keeps being pinged (every 200 ms, half of WATCHDOG_USEC).
	const pings = 5
	first := time.Time{}
	for i := 0; i < pings; i++ {
		m := next("WATCHDOG=1")
		if m.state != "WATCHDOG=1" {
			t.Fatalf("unexpected notify message after READY=1: %q", m.state)
		}
		if first.IsZero() {
			first = m.at
		}
	}
	t.Logf("%d watchdog pings in %v", pings, time.Since(first).Round(time.Millisecond))

	// SIGTERM: STOPPING=1, then a clean exit.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for {
		m := next("STOPPING=1")
		if m.state == "STOPPING=1" {
			break
		}
		if m.state != "WATCHDOG=1" {
			t.Fatalf("unexpected notify message after SIGTERM: %q", m.state)
		}
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("weftd exited with %v after SIGTERM", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("weftd did not exit within 20 s of SIGTERM")
	}
	if n := strings.Count(log.String(), `"msg":"systemd notify failed"`); n != 0 {
		t.Errorf("weftd logged %d notify failures", n)
	}
}
