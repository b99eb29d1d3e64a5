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
		pid, err := Ask(ctx, name)
		first <- answer{pid, err}
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
