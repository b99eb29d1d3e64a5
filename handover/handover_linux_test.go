package handover

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

func testName(t *testing.T) string {
	return fmt.Sprintf("weft-test-%d-%s", os.Getpid(), t.Name())
}

func TestHandOver(t *testing.T) {
	name := testName(t)
	old, err := Listen(name)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := Listen(name); !errors.Is(err, ErrHeld) {
		t.Fatalf("second Listen: %v, want ErrHeld", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type answer struct {
		pid int
		err error
	}
	first := make(chan answer, 1)
	go func() {
		tk, err := Ask(ctx, name)
		first <- answer{tk.PID, err}
	}()
	var req Request
	select {
	case req = <-old.Requests():
	case <-ctx.Done():
		t.Fatal("no request")
	}
	if req.PID != os.Getpid() {
		t.Errorf("request from pid %d, want %d", req.PID, os.Getpid())
	}
	// A second new weftd while the first waits is refused.
	if _, err := Ask(ctx, name); !errors.Is(err, ErrRefused) {
		t.Errorf("second Ask: %v, want ErrRefused", err)
	}
	select {
	case a := <-first:
		t.Fatalf("Ask returned before the old weftd stopped: %+v", a)
	case <-time.After(100 * time.Millisecond):
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	a := <-first
	if a.err != nil || a.pid != os.Getpid() {
		t.Fatalf("Ask: pid %d, %v", a.pid, a.err)
	}
	// The name is free for the new weftd.
	next, err := Listen(name)
	if err != nil {
		t.Fatalf("Listen after the hand-over: %v", err)
	}
	next.Close()
	if _, err := Ask(ctx, name); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Ask with nobody listening: %v, want ECONNREFUSED", err)
	}
}

// A request that is not the protocol's is dropped and leaves the listener serving.
func TestHandOverBadRequest(t *testing.T) {
	name := testName(t)
	l, err := Listen(name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, line := range []string{"hello\n", "\n", "hand over v2\n", "hand over v1 extra\n"} {
		var d net.Dialer
		c, err := d.Dial("unix", "@"+name)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(line))
		buf := make([]byte, 64)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(buf)
		c.Close()
		if n != 0 || err == nil {
			t.Errorf("request %q answered %q, %v; want the connection closed", line, buf[:n], err)
		}
	}
	select {
	case r := <-l.Requests():
		t.Fatalf("a bad request was taken: %+v", r)
	default:
	}
}

// Ask gives up with its context while the old weftd does not stop.
func TestHandOverAskTimeout(t *testing.T) {
	name := testName(t)
	l, err := Listen(name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := Ask(ctx, name); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ask: %v, want the context's deadline", err)
	}
}

// The old weftd's sockets pass to the new one with "stopped", and what waits in
// them is the new one's to read; a file of a name outside the protocol's stays.
func TestHandOverPassesSockets(t *testing.T) {
	name := testName(t)
	old, err := Listen(name)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	sock, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := sock.LocalAddr().(*net.UDPAddr).AddrPort()
	f, err := sock.File()
	if err != nil {
		t.Fatal(err)
	}
	f2, err := sock.File()
	if err != nil {
		t.Fatal(err)
	}
	sock.Close() // the copies keep it
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type answer struct {
		tk  Taken
		err error
	}
	got := make(chan answer, 1)
	go func() {
		tk, err := Ask(ctx, name)
		got <- answer{tk, err}
	}()
	select {
	case <-old.Requests():
	case <-ctx.Done():
		t.Fatal("no request")
	}
	old.Pass(map[string]*os.File{"path": f, "bad name\n": f2})
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("waits")); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil {
		t.Fatalf("Ask: %v", a.err)
	}
	defer a.tk.Close()
	if len(a.tk.Files) != 1 || a.tk.Files["path"] == nil {
		t.Fatalf("files passed: %v, want path only", a.tk.Files)
	}
	pc, err := net.FilePacketConn(a.tk.Files["path"])
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if pc.LocalAddr().(*net.UDPAddr).AddrPort() != addr {
		t.Fatalf("passed socket on %v, want %v", pc.LocalAddr(), addr)
	}
	buf := make([]byte, 16)
	_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err := pc.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "waits" {
		t.Fatalf("read the passed socket: %q, %v; want what waited in it", buf[:n], err)
	}
}
